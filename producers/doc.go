// Package producers is the Go client of Airlock: submit a tool request and
// wait for its outcome, and query ops.
//
// A Client is safe for concurrent use. Submit derives the op id from the
// request's fingerprint before publishing, so a retry (by the client after a
// transport error, or by the caller days later) always lands on the same
// op and never runs the call a second time.
package producers
