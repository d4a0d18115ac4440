// Package testenv starts real components for tests: an embedded NATS
// server with JetStream in a temporary directory, and a whole Airlock on
// it. Every test that needs NATS or Pebble starts them here. Passkey is
// a software passkey that signs approvals as a browser would.
package testenv
