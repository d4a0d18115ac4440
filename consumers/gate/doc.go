// Package gate turns requests into ops. For each tool.requested message it
// validates the request, derives the op id from its fingerprint, asks the
// policy, and appends the op's first event (decided or denied) to the op's
// own subject with Nats-Expected-Last-Subject-Sequence = 0. That append is
// the compare-and-swap that makes a request idempotent for ever: a retry,
// however late, finds the subject taken and resolves to the same op. For a
// ready op it then publishes a work item.
//
// Bad input is answered with a stable code on the request's
// Airlock-Reply-To inbox and recorded as a request.rejected event; it never
// touches an accepted op.
package gate
