// Package remote is the executor of remote tools: it forwards an op's call
// over NATS request/reply to an external tool server and stores what the
// server answers. One Remote serves one tool on one subject.
//
// # Protocol
//
// Version 1, JSON, specified in docs/remote.md. A call goes to the tool's
// subject as a [Request] (with the headers [HeaderOpID] and
// [HeaderAttempt]) and is answered with a [Reply]. When a call's answer is
// lost, a [StatusRequest] on the subject plus [StatusSuffix] asks what
// became of it, answered with a [StatusReply]. Servers must be idempotent
// per op id: a second call for an op returns the first outcome without
// doing the work again, and a status answer of [StateNever] is a promise
// never to run the attempt asked about.
//
// # Outcomes
//
// Nothing received the call (no responders): the op fails with
// REMOTE_UNAVAILABLE. The call was sent and its answer lost: the status
// decides; done settles the op as the server recorded it, never fails it,
// and anything else (running, unknown, no answer) ends it
// EXECUTION_AMBIGUOUS with what is known. [Remote.Recover] decides a lost
// attempt the same way: Done, Rerun or Ambiguous.
package remote
