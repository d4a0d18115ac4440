// Package projector folds the events stream into the Pebble store, in
// stream order, exactly once, and holds what acts on that projection:
//
//   - Projector: the fold itself (projector.go, observe.go).
//   - The query service (query.go, audit_query.go) answers airlock.v1.q.>
//     from the store, and ServeResults (results.go) the result endpoint
//     airlock.v1.fetch.<principal>.
//   - Expirer (expiry.go): every second, appends op.expired for each held
//     op whose hold ran out, against the held event's sequence, so it
//     loses to a grant that came first (the gate makes the same decision
//     when a grant arrives too late).
//   - Eraser (results.go): purges each kept result when its retention
//     ends or its workspace is over its byte bound, and records
//     op.result_erased.
//   - Scrubber (scrub.go): erases each finished op's request from
//     AIRLOCK_REQUESTS (secure delete while the backlog is short).
//   - Checkpoints (checkpoints.go): publishes and reads the signed audit
//     checkpoints of the Merkle log the projector builds.
//
// All of them read the same store, so they live with it; each runs in
// every process and is safe beside its copies in others (compare-and-swap
// appends, idempotent deletes).
//
// # Exactly-once apply
//
// The projector reads AIRLOCK_OPS with an ordered consumer starting after
// the last applied sequence that the store holds. It applies messages in
// batches and writes the sequence of the batch's last message in the same
// Pebble batch, so a crash at any point leaves the store at a batch
// boundary and the next run resumes from exactly there. A message at or
// below the stored sequence is never applied twice.
package projector
