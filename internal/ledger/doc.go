// Package ledger is the durable per-attempt record of an executor whose
// side effect cannot be repeated.
//
// Each op has one file under Dir, <op>.attempts, to which its attempts'
// records are appended, each framed with its kind, its attempt and its
// length (see frame.go):
//
//   - started, written by Begin before the caller takes its effect (spawns
//     a process, sends a call), and fsynced with the directory entry of a
//     new file: its existence is what counts. Update appends the record
//     again with more detail, such as a pid, without fsync; a crash loses
//     only that detail.
//   - done, the result, appended and fsynced by Finish after the effect.
//     A torn frame (a crash mid-append) is no frame: a crash leaves the
//     whole result or none.
//   - abandoned, appended by Abandon when the effect was never taken.
//
// Recovery reads them: a result means the attempt ran (Done); started
// without a result means it may have run and must never run again
// (Ambiguous); neither, for this instance's own attempt, means it never
// started (Rerun). A torn tail that names no attempt counts as a started
// record of any attempt that has none, so that it can only make recovery
// more careful. Forget removes the file.
//
// Versions before this layout kept a directory per op holding
// <attempt>.started and <attempt>.done; they are still read, listed and
// removed, and never written.
//
// Records go through bare system calls: an os.File costs several more on
// each open (the poller's probes of the descriptor), and an exec call
// writes four records (BenchmarkAttempt).
package ledger
