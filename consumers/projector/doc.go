// Package projector folds the events stream into the Pebble store, in
// stream order, exactly once, and answers queries about ops as a NATS micro
// service.
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
