// Package watch turns Airlock's live events into what `airlock watch`
// prints: one line or one JSON object per event, and a table of pending
// holds and recent outcomes for a terminal.
//
// # Events
//
// Airlock appends op events on airlock.v1.op.<ws>.<op>.<tool>.<verb>,
// rejections on airlock.v1.rejected.<ws> and its records on
// airlock.v1.sys.> to AIRLOCK_OPS, which republishes each message once
// stored on airlock.v1.live.<the same subject after airlock.v1.>, with
// its sequence and stored time in headers. Approvers, operators and
// auditors receive those through the stream import of the clients account
// (docs/authority.md): what the stream stored, never an append it
// refused. [Subjects] names the subscriptions, optionally for one
// workspace; [Republished] reads the server's headers; [Decode] makes an
// [Event] of each message. None of them carries arguments or results,
// only their digests and sizes, so neither does an Event.
//
// A message that is not one the stream republished (an answer a client
// aimed at a live subject, a stored copy sent as the answer to a direct
// get), that does not decode, or that is not what its subject says
// (another op's event) becomes an Event of kind [Undecodable] with the
// error: it is shown, not dropped, never stops the watch, and never
// counts as an outcome.
//
// # Output
//
// [Line] is the piped form: stable columns (time, workspace, op, tool,
// event) and then key=value details. [Event] marshals to the JSON form
// with stable keys. [Table] holds the terminal view's state and renders it
// as plain text; [Frame] wraps a rendering in the ANSI sequences of one
// redraw.
//
// Nothing here is safe for concurrent use; the caller owns every value it
// passes in and gets back.
package watch
