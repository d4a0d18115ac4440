package events

import (
	"github.com/nats-io/nats.go"
)

// DecodeRequest is the one decoder of a tool request, wherever it is
// read with its message's headers: published (the gate) or stored (the
// runner, an approver's client). It checks the size limit
// (MaxRequestBytes), that the message is a CloudEvent of type
// tool.requested, and the request's own rules (Request.Validate), and
// returns an *Error with the code of what is wrong. A message without
// CloudEvents headers is no request.
func DecodeRequest(h nats.Header, body []byte) (*Request, error) {
	return decodeRequest(h, body, false)
}

// DecodeStoredRequestBody is DecodeRequest for the body of a request
// Airlock stored, read without its headers (a batched direct get returns
// none): the request itself in binary mode, a CloudEvents envelope in
// structured mode. The same checks apply.
func DecodeStoredRequestBody(body []byte) (*Request, error) {
	return decodeRequest(nil, body, true)
}

func decodeRequest(h nats.Header, body []byte, bodyAlone bool) (*Request, error) {
	if n := len(body); n > MaxRequestBytes {
		return nil, Errorf(CodeRequestTooLarge, "request body is %d bytes, limit %d", n, MaxRequestBytes)
	}
	if bodyAlone {
		// Binary mode's body is the request; a structured envelope has no
		// workspace at its top.
		var req Request
		if err := UnmarshalJSON(body, &req); err == nil && req.Workspace != "" {
			return &req, req.Validate()
		}
		h = nats.Header{HeaderContentType: []string{ContentTypeStructured}}
	}
	ev, err := Decode(h, body)
	if err != nil {
		return nil, err
	}
	if t := Type(ev.Type()); t != TypeRequested {
		if !t.Known() {
			return nil, Errorf(CodeUnknownEventType, "an event type (%d bytes) that is not Airlock's on a request subject: publish %s", len(ev.Type()), TypeRequested)
		}
		return nil, Errorf(CodeInvalidEvent, "only %s may be published on request subjects, got %s", TypeRequested, t)
	}
	data, err := DecodeData(ev)
	if err != nil {
		return nil, err
	}
	req := data.(*Request)
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}
