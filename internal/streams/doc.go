// Package streams provisions Airlock's JetStream streams idempotently: each
// start creates what is missing and updates what exists. It also names the
// durable consumers, which the gate and the executor runner create or
// update when they start. docs/subjects.md describes the result.
package streams
