package remote

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Version is the protocol version this package speaks. Every message
// carries it as "v".
const Version = 1

// Protocol names.
const (
	// HeaderOpID carries the op id on a call, so a server can route or log
	// it without parsing the body.
	HeaderOpID = "Airlock-Op-Id"
	// HeaderAttempt carries the attempt id on a call.
	HeaderAttempt = "Airlock-Attempt"
	// StatusSuffix is appended to a tool's subject to make its status
	// subject: calls on "tools.deploy", status queries on
	// "tools.deploy.status".
	StatusSuffix = ".status"
)

// Request is a call, sent to the tool's subject. Args is the op's args,
// canonical JSON.
type Request struct {
	V         int             `json:"v"`
	OpID      string          `json:"op_id"`
	Attempt   string          `json:"attempt"`
	Workspace string          `json:"workspace"`
	Agent     string          `json:"agent"`
	Tool      string          `json:"tool"`
	Args      json.RawMessage `json:"args"`
}

// Reply answers a call: exactly one of Result and Error. A server building
// one must set Result to JSON (json.RawMessage("null") for no result):
// an empty Result is left out of the encoding.
type Reply struct {
	V      int             `json:"v"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Error is a tool server's refusal or failure. Code is the server's own
// stable code, UPPER_SNAKE; a few of Airlock's codes have a meaning on
// the wire (see Remote.Execute).
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// StatusRequest asks what became of an op, sent to the status subject.
// Attempt is the attempt Airlock is deciding about: a server that answers
// StateNever promises never to run that attempt.
type StatusRequest struct {
	V       int    `json:"v"`
	OpID    string `json:"op_id"`
	Attempt string `json:"attempt"`
}

// State is what a tool server knows of an op.
type State string

// The states a status reply may name.
const (
	// StateDone: the op's outcome is recorded; the reply carries it
	// (Result or Error), the same a call for the op would get.
	StateDone State = "done"
	// StateRunning: an attempt of the op has started and has no outcome
	// yet.
	StateRunning State = "running"
	// StateNever: no attempt of the op has started, and the attempt asked
	// about never will: the server refuses it from now on.
	StateNever State = "never"
	// StateUnknown: the server cannot tell (it lost its record, or keeps
	// none).
	StateUnknown State = "unknown"
)

// StatusReply answers a status query. With StateDone exactly one of
// Result and Error is set. A server that cannot read the query answers
// with Error and no State.
type StatusReply struct {
	V      int             `json:"v"`
	State  State           `json:"state,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// maxCodeBytes bounds an error code from a server.
const maxCodeBytes = 64

// DecodeReply parses a call's reply. It returns an error for anything but
// a JSON object with "v": 1 and exactly one of "result" and a non-null
// "error" (a "result" of null is a result). Unknown fields are ignored.
func DecodeReply(data []byte) (*Reply, error) {
	m, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	res, e, err := outcome(m)
	if err != nil {
		return nil, err
	}
	if res == nil && e == nil {
		return nil, errors.New(`reply has neither "result" nor "error"`)
	}
	return &Reply{V: Version, Result: res, Error: e}, nil
}

// DecodeStatusReply parses a status reply. It returns an error for
// anything but a JSON object with "v": 1 and either a known "state" or an
// "error" alone; "done" needs exactly one of "result" and "error".
func DecodeStatusReply(data []byte) (*StatusReply, error) {
	m, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	res, e, err := outcome(m)
	if err != nil {
		return nil, err
	}
	st := &StatusReply{V: Version, Result: res, Error: e}
	raw, ok := m["state"]
	if !ok || string(raw) == "null" {
		if e == nil || res != nil {
			return nil, errors.New(`status reply has no "state"`)
		}
		return st, nil // the server refused the query
	}
	if err := json.Unmarshal(raw, &st.State); err != nil {
		return nil, errors.New(`"state" is not a string`)
	}
	switch st.State {
	case StateDone:
		if res == nil && e == nil {
			return nil, errors.New(`state "done" has neither "result" nor "error"`)
		}
	case StateRunning, StateNever, StateUnknown:
		st.Result, st.Error = nil, nil
	default:
		return nil, fmt.Errorf("unknown state (%d bytes)", len(st.State))
	}
	return st, nil
}

// decodeObject parses data as a JSON object of protocol version 1.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, fmt.Errorf("not a JSON object (%d bytes)", len(data))
	}
	raw, ok := m["v"]
	if !ok {
		return nil, errors.New(`no protocol version "v"`)
	}
	var v int
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, errors.New("protocol version is not an integer")
	}
	if v != Version {
		return nil, fmt.Errorf("protocol version %d, want %d", v, Version)
	}
	return m, nil
}

// outcome reads "result" and "error" of m. An "error" of null is absent;
// a non-null "error" next to a non-null "result" is an error.
func outcome(m map[string]json.RawMessage) (json.RawMessage, *Error, error) {
	res, hasRes := m["result"]
	rawErr, hasErr := m["error"]
	if hasErr && string(rawErr) == "null" {
		hasErr = false
	}
	if !hasErr {
		if !hasRes {
			return nil, nil, nil
		}
		return res, nil, nil
	}
	if hasRes && string(res) != "null" {
		return nil, nil, errors.New(`both "result" and "error"`)
	}
	var e Error
	if err := json.Unmarshal(rawErr, &e); err != nil {
		return nil, nil, errors.New(`"error" is not {"code","message"}`)
	}
	if e.Code == "" || len(e.Code) > maxCodeBytes {
		return nil, nil, fmt.Errorf(`"error" needs a "code" of 1 to %d bytes`, maxCodeBytes)
	}
	return nil, &e, nil
}
