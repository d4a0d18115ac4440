package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// Header names of the NATS binding.
const (
	// HeaderPrefix starts every CloudEvents attribute header (binary mode).
	HeaderPrefix = "ce-"
	// HeaderContentType is the content type of the body.
	HeaderContentType = "Content-Type"
	// ContentTypeJSON is the data content type of every Airlock event.
	ContentTypeJSON = "application/json"
	// ContentTypeStructured marks a structured-mode message.
	ContentTypeStructured = "application/cloudevents+json"
	// HeaderReplyTo names the subject (airlock.v1.reply.<agent>.<...>) the
	// gate and the executors answer a request on with a Reply.
	HeaderReplyTo = "Airlock-Reply-To"
	// HeaderRestates marks an event that states again the outcome of an op
	// that left AIRLOCK_OPS for AIRLOCK_ARCHIVE (ADR 0026): a retry of the
	// op made it a first event again, and this event, a copy of the
	// archived outcome event stored at the sequence the header names, ends
	// that. The projector folds neither into the op.
	HeaderRestates = "Airlock-Restates"
)

// NewEvent builds a CloudEvent of type t with a fresh id, the current time,
// and data marshalled as JSON. subject is the ce-subject (the op id for op
// events).
func NewEvent(t Type, source, subject string, data any) (event.Event, error) {
	body, err := MarshalJSON(data)
	if err != nil {
		return event.Event{}, fmt.Errorf("marshal %s: %w", t.Short(), err)
	}
	return NewEventRaw(t, source, subject, nuid.Next(), body)
}

// MarshalJSON is json.Marshal without HTML escaping, so embedded JSON
// (args, results) is stored byte for byte as its digest was taken.
func MarshalJSON(v any) ([]byte, error) {
	if b, ok := appendFast(make([]byte, 0, 512), v); ok {
		return b, nil
	}
	return marshalStd(v)
}

// marshalStd is MarshalJSON through encoding/json.
func marshalStd(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// NewEventRaw is NewEvent with a chosen id and pre-encoded JSON data.
func NewEventRaw(t Type, source, subject, id string, data []byte) (event.Event, error) {
	ev := event.New()
	ev.SetType(string(t))
	ev.SetSource(source)
	ev.SetID(id)
	ev.SetTime(time.Now().UTC())
	if subject != "" {
		ev.SetSubject(subject)
	}
	if err := ev.SetData(ContentTypeJSON, data); err != nil {
		return event.Event{}, err
	}
	return ev, ev.Validate()
}

// NewMessage is the binary-mode message Encode(natsSubject, ev) gives for
// the event NewEventRaw(t, source, subject, id, data) would build, written
// straight into headers: the hot path for events Airlock writes itself.
// source, subject and id are percent-encoded as Encode does.
func NewMessage(natsSubject string, t Type, source, subject, id string, data []byte) *nats.Msg {
	// Room for the headers an append or a submit adds (the expected
	// sequence and its subject, the reply subject, the message id).
	msg := &nats.Msg{Subject: natsSubject, Header: make(nats.Header, 12), Data: data}
	binaryHeader(msg.Header, string(t), source, id, subject, time.Now(), ContentTypeJSON)
	return msg
}

// binaryHeader writes the binary-mode headers of an event's required and
// common attributes into h, percent-encoded: the one writer Encode and
// NewMessage share. A zero at writes no ce-time.
func binaryHeader(h nats.Header, typ, source, id, subject string, at time.Time, contentType string) {
	// One allocation for the values; each header's slice is capped so
	// that an append to one copies rather than overwrites the next.
	vals := make([]string, 0, 7)
	one := func(v string) []string {
		vals = append(vals, v)
		return vals[len(vals)-1 : len(vals) : len(vals)]
	}
	h[HeaderPrefix+"specversion"] = one(event.CloudEventsVersionV1)
	h[HeaderPrefix+"type"] = one(encodeHeader(typ))
	h[HeaderPrefix+"source"] = one(encodeHeader(source))
	h[HeaderPrefix+"id"] = one(encodeHeader(id))
	if !at.IsZero() {
		h[HeaderPrefix+"time"] = one(at.UTC().Format(time.RFC3339Nano))
	}
	if subject != "" {
		h[HeaderPrefix+"subject"] = one(encodeHeader(subject))
	}
	h[HeaderContentType] = one(contentType)
}

// Encode renders ev as a binary-mode NATS message on subject: every
// attribute in a percent-encoded ce-<name> header, the data as the body.
func Encode(subject string, ev event.Event) *nats.Msg {
	msg := nats.NewMsg(subject)
	h := msg.Header
	ct := ev.DataContentType()
	if ct == "" {
		ct = ContentTypeJSON
	}
	binaryHeader(h, ev.Type(), ev.Source(), ev.ID(), ev.Subject(), ev.Time(), ct)
	if s := ev.DataSchema(); s != "" {
		h[HeaderPrefix+"dataschema"] = []string{encodeHeader(s)}
	}
	for name, v := range ev.Extensions() {
		h[HeaderPrefix+name] = []string{encodeHeader(fmt.Sprint(v))}
	}
	msg.Data = ev.Data()
	return msg
}

// Decode reads a CloudEvent from a NATS message in either content mode:
// structured when Content-Type is application/cloudevents+json, binary when
// a ce-specversion header is present. It returns an *Error with code
// INVALID_EVENT for anything else or for an event the spec forbids.
func Decode(h nats.Header, body []byte) (event.Event, error) {
	ct := h.Get(HeaderContentType)
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == ContentTypeStructured {
		var ev event.Event
		if err := unmarshalStructured(body, &ev); err != nil {
			return event.Event{}, Errorf(CodeInvalidEvent, "structured CloudEvent: %s", jsonProblem(err))
		}
		if err := ev.Validate(); err != nil {
			return event.Event{}, Errorf(CodeInvalidEvent, "structured CloudEvent: %v", err)
		}
		if spec := ev.SpecVersion(); spec != event.CloudEventsVersionV1 {
			return event.Event{}, Errorf(CodeInvalidEvent, "unsupported specversion %s, want %s", sized(spec), event.CloudEventsVersionV1)
		}
		if err := checkTime(ev); err != nil {
			return event.Event{}, err
		}
		return ev, nil
	}
	// Header names are matched without regard to case; two headers that
	// differ only in case are ambiguous and refused.
	ce := make(map[string]string, len(h))
	for key, vals := range h {
		lk := strings.ToLower(key)
		if !strings.HasPrefix(lk, HeaderPrefix) || len(vals) == 0 {
			continue
		}
		if _, dup := ce[lk]; dup || len(vals) > 1 {
			return event.Event{}, Errorf(CodeInvalidEvent, "header %s given more than once", lk)
		}
		ce[lk] = vals[0]
	}
	spec := ce[HeaderPrefix+"specversion"]
	if spec == "" {
		return event.Event{}, Errorf(CodeInvalidEvent, "not a CloudEvent: no ce-specversion header, and Content-Type %s is not %s", sized(ct), ContentTypeStructured)
	}
	if spec != event.CloudEventsVersionV1 {
		return event.Event{}, Errorf(CodeInvalidEvent, "unsupported specversion %s, want %s", sized(spec), event.CloudEventsVersionV1)
	}
	ev := event.New()
	for lk, raw := range ce {
		key := lk
		name := lk[len(HeaderPrefix):]
		v, err := decodeHeader(raw)
		if err != nil {
			return event.Event{}, Errorf(CodeInvalidEvent, "header %s: %v", key, err)
		}
		switch name {
		case "specversion":
		case "type":
			ev.SetType(v)
		case "source":
			ev.SetSource(v)
		case "id":
			ev.SetID(v)
		case "subject":
			ev.SetSubject(v)
		case "dataschema":
			ev.SetDataSchema(v)
		case "datacontenttype":
			// As the CloudEvents SDK's NATS binding writes it, where
			// Airlock writes Content-Type: either, or both the same.
			if ct != "" && ct != v {
				return event.Event{}, Errorf(CodeInvalidEvent, "binary CloudEvent: ce-datacontenttype %s and Content-Type %s disagree", sized(v), sized(ct))
			}
			ct = v
		case "time":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return event.Event{}, Errorf(CodeInvalidEvent, "ce-time %s is not RFC 3339", sized(v))
			}
			ev.SetTime(t)
		default:
			ev.SetExtension(name, v)
		}
	}
	if ct != "" {
		ev.SetDataContentType(ct)
	}
	ev.DataEncoded = body
	if err := ev.Validate(); err != nil {
		return event.Event{}, Errorf(CodeInvalidEvent, "binary CloudEvent: %v", err)
	}
	if err := checkTime(ev); err != nil {
		return event.Event{}, err
	}
	return ev, nil
}

// checkTime refuses a time that Encode, which writes it in UTC, could not
// write as RFC 3339: 0000-01-01T00:00:00+01:00 is in year -1 in UTC.
func checkTime(ev event.Event) error {
	if t := ev.Time(); !t.IsZero() {
		if y := t.UTC().Year(); y < 0 || y > 9999 {
			return Errorf(CodeInvalidEvent, "time %s is outside years 0000-9999 in UTC", t.Format(time.RFC3339Nano))
		}
	}
	return nil
}

// unmarshalStructured is json.Unmarshal into ev, with the SDK's panics
// (data_base64 that is not a string: index out of range) turned into errors.
// Messages of rejections never quote the input: a rejection is recorded
// in AIRLOCK_OPS, which outlives the request, and the input may be
// anything an agent sent (a secret pasted in the wrong field, say). They
// give sizes, offsets and kinds instead.

// sized describes an input string by its size alone.
func sized(s string) string {
	if s == "" {
		return "(empty)"
	}
	return fmt.Sprintf("(%d bytes)", len(s))
}

// jsonProblem describes a JSON decoding error without the input's bytes:
// encoding/json quotes the offending character or number.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("not valid JSON at offset %d", syn.Offset)
	case errors.As(err, &typ):
		kind, _, _ := strings.Cut(typ.Value, " ")
		return fmt.Sprintf("a JSON %s at offset %d where %s is wanted", kind, typ.Offset, typ.Type)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected end of JSON"
	}
	return "does not decode as one JSON object of the event's fields"
}

func unmarshalStructured(body []byte, ev *event.Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed event: %v", r)
		}
	}()
	return json.Unmarshal(body, ev)
}

// DecodeData unmarshals ev's JSON data into the struct for its type. It
// returns *Error UNKNOWN_EVENT_TYPE for a type outside AllTypes and
// INVALID_EVENT for data that does not decode.
func DecodeData(ev event.Event) (any, error) {
	t := Type(ev.Type())
	payload := NewPayload(t)
	if payload == nil {
		return nil, Errorf(CodeUnknownEventType, "event type %s is not one of Airlock's (%s...)", sized(ev.Type()), TypeRequested)
	}
	if mt := ev.DataMediaType(); mt != "" && mt != ContentTypeJSON {
		return nil, Errorf(CodeInvalidEvent, "data content type %s, want %s", sized(mt), ContentTypeJSON)
	}
	if err := UnmarshalJSON(ev.Data(), payload); err != nil {
		return nil, Errorf(CodeInvalidEvent, "%s data: %s", t.Short(), jsonProblem(err))
	}
	return payload, nil
}

// encodeHeader percent-encodes what a header value may not carry as is:
// bytes outside printable ASCII, space, '"' and '%'.
func encodeHeader(s string) string {
	need := false
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f || c == '"' || c == '%' {
			need = true
			break
		}
	}
	if !need {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || c == '"' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func decodeHeader(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
			return "", fmt.Errorf("bad percent-encoding at offset %d of %d bytes", i, len(s))
		}
		b.WriteByte(byte(unhex(s[i+1])<<4 | unhex(s[i+2])))
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// DecodeStored decodes an event read back from Airlock's own streams into
// its type, ce-id and data struct. It takes the short path for binary-mode
// messages in the exact form Encode writes (lower-case ce- headers) and
// skips the CloudEvents validation that Decode does; anything else goes
// through Decode and DecodeData. Use Decode for input from outside.
func DecodeStored(h nats.Header, body []byte) (Type, string, any, error) {
	if v := h[HeaderPrefix+"specversion"]; len(v) == 1 && v[0] == event.CloudEventsVersionV1 {
		t := Type(h.Get(HeaderPrefix + "type"))
		if payload := NewPayload(t); payload != nil {
			if err := UnmarshalJSON(body, payload); err != nil {
				return t, "", nil, Errorf(CodeInvalidEvent, "%s data: %v", t.Short(), err)
			}
			id, err := decodeHeader(h.Get(HeaderPrefix + "id"))
			if err != nil {
				return t, "", nil, Errorf(CodeInvalidEvent, "ce-id: %v", err)
			}
			return t, id, payload, nil
		}
	}
	ev, err := Decode(h, body)
	if err != nil {
		return "", "", nil, err
	}
	data, err := DecodeData(ev)
	if err != nil {
		return Type(ev.Type()), ev.ID(), nil, err
	}
	return Type(ev.Type()), ev.ID(), data, nil
}
