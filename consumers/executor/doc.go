// Package executor runs ready ops exactly once. An Executor does one tool's
// work; the Runner takes that tool's decided events (the work items: a
// durable consumer on AIRLOCK_OPS filtered on airlock.v1.op.*.*.<tool>.decided),
// claims each op with compare-and-swap before any side effect (the started
// event, ADR 0023), runs the executor, and appends the result before it
// acks the decided event.
//
// # Contract
//
//   - A claim (op.started with a fresh attempt id and the claim) is stored
//     before Execute is called; the operands check and Prepare come before
//     it and touch nothing. Two runners racing for one op: one claim wins,
//     the other reads the winner's event and lets its delivery go.
//   - completed is appended, with the result, before the decided event is
//     acked. If it cannot be appended the delivery is not acked, the caller
//     never sees success, and recovery decides.
//   - A decided event delivered again while its op is still claimed through
//     an earlier delivery of the same consumer means the claiming runner is
//     gone (runners heartbeat while they run). The executor's Recover says
//     what happens: run again, completed from its own record, or ambiguous.
package executor
