// Package oplog appends transitions to an op with JetStream's
// compare-and-swap and reads the newest one back. It is the only way Airlock
// writes op events.
//
// Each event goes to airlock.v1.op.<ws>.<op>.<tool>.<verb> with
// Nats-Expected-Last-Subject-Sequence set to the op's last sequence and
// Nats-Expected-Last-Subject-Sequence-Subject set to airlock.v1.op.<ws>.<op>.>,
// so the check covers every event of the op whatever its verb.
//
// Appends are asynchronous: Start publishes and returns at once, Wait
// resolves the outcome. Callers start a batch of appends and then wait for
// them, so a batch costs one round trip instead of one per op.
package oplog
