// Package events is Airlock's event catalog and wire format: the versioned
// CloudEvents types of the op state machine, their data structs, the
// subjects they travel on, canonical JSON, request fingerprints and op ids,
// validation limits, stable error codes, and the binding of CloudEvents to
// NATS messages.
//
// # Requests and ops
//
// A Request names one logical tool call. Validate canonicalises its args
// (RFC 8785 with stricter numbers) and checks every limit; Fingerprint
// hashes the canonical {agent, args, idempotency_key, tool, workspace}, and
// OpID derives the op id from it, so a retry days later names the same op.
// Op.Apply is the op state machine: the only way an op's state changes.
//
// # Wire format
//
// Encode writes binary content mode (percent-encoded ce-* headers, JSON
// body); Decode reads binary or structured mode and returns an *Error with
// code INVALID_EVENT for anything else. DecodeStored is the short path for
// events Airlock wrote itself.
//
// # Errors
//
// Every error that crosses a process boundary is an *Error with a stable
// Code; codes are listed in docs/errors.md and never renamed.
package events
