// Package jspub publishes messages to JetStream and matches each
// acknowledgement to its message, over a reply subject of its own: the
// asynchronous publish of nats.go's jetstream package, with the common
// acknowledgement, {"stream":"S","seq":N}, read without encoding/json.
// Decoding every acknowledgement with encoding/json under the jetstream
// package's publisher lock was about 3% of the pipeline's CPU.
//
// Unlike the jetstream package it does not bound the publishes in flight
// (its callers do: the gate's and the runners' batches, one request per
// Submit), does not retry a publish that found no stream (the caller's
// read-back decides, see oplog), and takes no callbacks. Like it, it fails
// every waiting acknowledgement with nats.ErrDisconnected when the
// connection starts reconnecting (an ack lost with the connection would
// otherwise be waited for until the caller's context ends), and with
// nats.ErrConnectionClosed when it closes.
package jspub
