// Package archive keeps AIRLOCK_OPS in segments (ADR 0026).
//
// A segment is a copy of every message AIRLOCK_OPS stored in one range of
// its sequences, [From, To), in order, as the stream stored them: subject,
// headers, data, sequence and time. Segments are stored in AIRLOCK_ARCHIVE
// one after another, each beginning where the one before it ends, the
// first at sequence 1, so that the archive's end (the last segment's To)
// says that every message of AIRLOCK_OPS below it has a copy there. Ops
// that ended may then leave AIRLOCK_OPS (and the server's subject index)
// below that end: the projector reads what is gone from the segments, in
// its place in the order, so that a projection and an audit log rebuilt
// from the streams are the same as the ones built while the ops ran.
package archive
