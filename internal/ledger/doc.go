// Package ledger is the durable per-attempt record of an executor whose
// side effect cannot be repeated.
//
// Every op's records go to a journal of append-only segment files in
// Dir, journal-<16 hex digits>.log, one frame per record with its kind,
// op, attempt and a CRC-32C (see journal.go):
//
//   - started, written by Begin before the caller takes its effect (spawns
//     a process, sends a call), and synced. Update appends the record
//     again with more detail, such as a pid, without a sync; a crash loses
//     only that detail.
//   - done, the result, appended and synced by Finish after the effect.
//   - abandoned, appended and synced by Abandon when the effect was never
//     taken.
//   - forget, appended by Forget once the op's outcome is stored; the
//     op's records are then overwritten with zeros where they are.
//
// Recovery reads them: a result means the attempt ran (Done); started
// without a result means it may have run and must never run again
// (Ambiguous); neither, for this instance's own attempt, means it never
// started (Rerun). A frame that is not whole, or whose checksum fails, is
// skipped: its writer had not returned, so a started record's effect was
// not taken, and a result cut short leaves the attempt started without
// one (Ambiguous).
//
// Syncs are shared: the records appended while one runs are made durable
// by the next, one fdatasync for all of them. A process holds the
// journal of a directory once, whatever number of Ledger values name it,
// and appends to a segment of its own; ReadKept reads one from disk
// without changing it. The directory belongs to one process at a time
// (the data dir's).
//
// Versions before the journal kept a file per op, <op>.attempts (text
// frames, frame.go), and before that a directory per op holding
// <attempt>.started and <attempt>.done; both are still read, listed and
// removed, and never written. A torn tail of such a file that names no
// attempt counts as a started record of any attempt that has none, as
// those versions read it.
//
// One file created and removed per op cost a journaled change of the
// directory each, and concurrent creates contend in the file system: an
// exec call's records took 17 µs alone and 91 µs with 16 at once
// (BenchmarkAttempt, BenchmarkAttemptParallel), 4-6 µs in the journal.
package ledger
