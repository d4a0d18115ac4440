// Package gate turns requests into ops. For each tool.requested message it
// validates the request, derives the op id from its fingerprint, asks the
// policy, and appends the op's first event (decided or denied) expecting the
// op's last sequence to be 0. That append is the compare-and-swap that
// makes a request idempotent for ever: a retry, however late, finds the op
// taken and resolves to the same op. A decided event is also the work item:
// the executors of the tool consume it.
//
// Bad input is answered with a stable code on the request's
// Airlock-Reply-To inbox and recorded as a request.rejected event; it never
// touches an accepted op.
package gate
