// Package ledger is the durable per-attempt record of an executor whose
// side effect cannot be repeated: one directory per op under Dir holding,
// per attempt, <attempt>.started and <attempt>.done.
//
// Begin creates .started exclusively (O_EXCL), writes it, and fsyncs it
// and its directory before the caller takes its effect (spawns a
// process, sends a call): its existence is what counts, and a crash can
// leave it torn, which reads as started all the same. Update overwrites
// it in place (no fsync) with a record with more detail, such as a pid; a
// crash loses only that detail, or tears the record, which still reads as
// started.
//
// Finish writes .done whole to a temporary name (<attempt>.done.tmp),
// fsyncs it, renames it and fsyncs the directory after the effect, so a
// crash leaves either the whole result or none. Recovery reads both: a
// result means the attempt ran (Done); started without a result means it
// may have run and must never run again (Ambiguous); neither, for this
// instance's own attempt, means it never started (Rerun).
package ledger
