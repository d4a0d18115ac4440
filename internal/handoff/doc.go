// Package handoff passes the args of requests the gate admits to the
// executors of the same process, so that they need not read them back
// from AIRLOCK_REQUESTS.
//
// The gate has parsed and checked each request it admits: its fingerprint
// derived the op id, and its args are exactly the bytes stored at its
// request sequence. An executor that finds an op's args here, under the
// same op id and request sequence, takes what it would have read and
// checked itself. One that does not (another process admitted the op, the
// entry was evicted, the process restarted) reads them from the stream as
// before: the handoff only saves work, it never decides what runs.
//
// The same bounded Store keeps, in the gate, the requests of the ops it
// held, for the resume of their grants (consumers/gate, ADR 0017).
package handoff
