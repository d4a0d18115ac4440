package events_test

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/events"
)

const testOpID = "op_6f1c2b0e9a7d4c3b8e5f1a2d3c4b5a69"

func requireCode(t *testing.T, err error, code events.Code) {
	t.Helper()
	require.Error(t, err)
	assert.Equal(t, code, events.CodeOf(err), "error: %v", err)
	assert.ErrorIs(t, err, &events.Error{Code: code})
}

func TestEncodeHeaders(t *testing.T) {
	data := []byte(`{"op_id":"` + testOpID + `","workspace":"acme"}`)
	ev, err := events.NewEventRaw(events.TypeScrubbed, "urn:airlock:exécutor 1 \"main\"", `op "x" 100% ü`, "id 50%", data)
	require.NoError(t, err)
	at := time.Date(2025, 3, 4, 5, 6, 7, 890000000, time.FixedZone("CET", 3600))
	ev.SetTime(at)
	ev.SetExtension("traceparent", "00-abc def-01")

	msg := events.Encode("airlock.v1.op.acme."+testOpID, ev)
	assert.Equal(t, "airlock.v1.op.acme."+testOpID, msg.Subject)
	want := nats.Header{
		"ce-specversion": {"1.0"},
		"ce-type":        {"dev.airlock.op.scrubbed.v1"},
		"ce-source":      {"urn:airlock:ex%C3%A9cutor%201%20%22main%22"},
		"ce-id":          {"id%2050%25"},
		"ce-time":        {"2025-03-04T04:06:07.89Z"},
		"ce-subject":     {"op%20%22x%22%20100%25%20%C3%BC"},
		"ce-traceparent": {"00-abc%20def-01"},
		"Content-Type":   {"application/json"},
	}
	assert.Equal(t, want, msg.Header)
	assert.Equal(t, data, msg.Data)
	for k, vs := range msg.Header {
		for _, v := range vs {
			for i := 0; i < len(v); i++ {
				assert.True(t, v[i] > 0x20 && v[i] < 0x7f && v[i] != '"', "header %s has byte %#x", k, v[i])
			}
		}
	}
}

func TestEncodeDecodeBinaryRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		typ     events.Type
		source  string
		subject string
		id      string
		ext     map[string]string
		data    string
	}{
		{name: "plain", typ: events.TypeDecided, source: "airlock/gate", subject: testOpID, id: "Jx1rT0xk9Q2aV7bB3cN4dE", data: `{"op_id":"` + testOpID + `"}`},
		{name: "no subject", typ: events.TypeRejected, source: "airlock/gate", id: "1", data: `{"code":"INVALID_ARGS"}`},
		{name: "spaces", typ: events.TypeHeld, source: "urn:airlock:my gate", subject: "op with spaces", id: "an id", data: `{}`},
		{name: "percent", typ: events.TypeHeld, source: "airlock/gate", subject: "100% sure %41 %zz %", id: "%%%", data: `{}`},
		{name: "quotes", typ: events.TypeGranted, source: `urn:airlock:"quoted"`, subject: `say "hi"`, id: `"`, data: `{}`},
		{name: "non-ASCII", typ: events.TypeGranted, source: "urn:airlock:gäte-東京", subject: "ümlaut 東京 😀", id: "ид", data: `{"reason":"ok ✓"}`},
		{name: "control characters", typ: events.TypeFailed, source: "airlock/x", subject: "a\tb\r\nc\x7fd", id: "x\x00y", data: `{}`},
		{name: "URL source", typ: events.TypeFailed, source: "https://airlock.example.com/executor?x=1#y", subject: "s", id: "i", data: `{}`},
		{name: "extensions", typ: events.TypeClaimed, source: "airlock/executor", subject: testOpID, id: "i",
			ext: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "note": "50% done, \"ok\" ü"}, data: `{"attempt":"a1"}`},
		{name: "empty data", typ: events.TypeExpired, source: "airlock/gate", subject: "s", id: "i", data: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := events.NewEventRaw(tt.typ, tt.source, tt.subject, tt.id, []byte(tt.data))
			require.NoError(t, err)
			at := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
			ev.SetTime(at)
			for k, v := range tt.ext {
				ev.SetExtension(k, v)
			}
			msg := events.Encode("airlock.v1.test", ev)

			got, err := events.Decode(msg.Header, msg.Data)
			require.NoError(t, err)
			assert.Equal(t, "1.0", got.SpecVersion())
			assert.Equal(t, string(tt.typ), got.Type())
			assert.Equal(t, ev.Source(), got.Source())
			assert.Equal(t, tt.subject, got.Subject())
			assert.Equal(t, tt.id, got.ID())
			assert.True(t, at.Equal(got.Time()), "time %v", got.Time())
			assert.Equal(t, events.ContentTypeJSON, got.DataContentType())
			assert.Equal(t, tt.data, string(got.Data()))
			gotExt := map[string]string{}
			for k, v := range got.Extensions() {
				gotExt[k] = v.(string)
			}
			want := tt.ext
			if want == nil {
				want = map[string]string{}
			}
			assert.Equal(t, want, gotExt)

			// Encoding what was decoded gives the same message.
			again := events.Encode("airlock.v1.test", got)
			assert.Equal(t, msg.Header, again.Header)
			assert.Equal(t, msg.Data, again.Data)
		})
	}
}

func TestNewEvent(t *testing.T) {
	d := &events.Expired{OpHeader: events.OpHeader{OpID: testOpID, Workspace: "acme"}, HoldID: "hold_1"}
	before := time.Now().Add(-time.Second)
	ev, err := events.NewEvent(events.TypeExpired, "airlock/gate", testOpID, d)
	require.NoError(t, err)
	assert.Equal(t, "dev.airlock.op.expired.v1", ev.Type())
	assert.Equal(t, testOpID, ev.Subject())
	assert.Len(t, ev.ID(), 22, "nuid")
	assert.True(t, ev.Time().After(before))
	assert.JSONEq(t, `{"op_id":"`+testOpID+`","workspace":"acme","hold_id":"hold_1"}`, string(ev.Data()))

	other, err := events.NewEvent(events.TypeExpired, "airlock/gate", testOpID, d)
	require.NoError(t, err)
	assert.NotEqual(t, ev.ID(), other.ID(), "fresh id per event")

	_, err = events.NewEvent(events.TypeExpired, "airlock/gate", "", map[string]any{"c": make(chan int)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "marshal expired")
}

func TestDecodeBinaryHeaders(t *testing.T) {
	h := nats.Header{}
	h.Set("ce-specversion", "1.0")
	h.Set("ce-type", "dev.airlock.op.granted.v1")
	h.Set("ce-source", "urn:airlock:approver%20cli")
	h.Set("ce-id", "abc")
	h.Set("ce-subject", "op%c3%bc%2f%41") // lower-case hex escapes are accepted
	h.Set("ce-time", "2025-06-01T12:00:00+02:00")
	h.Set("ce-dataschema", "https://airlock.dev/schemas/granted.json")
	h.Set("ce-region", "eu%2Dwest")
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Airlock-Reply-To", "_INBOX.x")
	body := []byte(`{"op_id":"` + testOpID + `","workspace":"acme","hold_id":"h1","args_digest":"sha256:00","approver":"alice","reason":"ok"}`)

	ev, err := events.Decode(h, body)
	require.NoError(t, err)
	assert.Equal(t, "urn:airlock:approver cli", ev.Source())
	assert.Equal(t, "opü/A", ev.Subject())
	assert.Equal(t, "https://airlock.dev/schemas/granted.json", ev.DataSchema())
	assert.True(t, time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC).Equal(ev.Time()))
	assert.Equal(t, map[string]any{"region": "eu-west"}, ev.Extensions())
	assert.Equal(t, "application/json; charset=utf-8", ev.DataContentType())

	data, err := events.DecodeData(ev)
	require.NoError(t, err)
	assert.Equal(t, &events.Granted{
		OpHeader: events.OpHeader{OpID: testOpID, Workspace: "acme"},
		HoldID:   "h1", ArgsDigest: "sha256:00", Approver: "alice", Reason: "ok",
	}, data)
}

func structuredHeader(ct string) nats.Header {
	h := nats.Header{}
	h.Set(events.HeaderContentType, ct)
	return h
}

func TestDecodeStructured(t *testing.T) {
	want := &events.Claimed{
		OpHeader: events.OpHeader{OpID: testOpID, Workspace: "acme"},
		Attempt:  "att-1", Claim: events.Claim{Executor: "send_email", WorkSeq: 7, Delivery: 2},
	}
	raw := `{"op_id":"` + testOpID + `","workspace":"acme","attempt":"att-1","executor":"send_email","work_seq":7,"delivery":2}`
	b64 := base64.StdEncoding.EncodeToString([]byte(raw))
	tests := []struct {
		name string
		ct   string
		body string
	}{
		{name: "data object", ct: "application/cloudevents+json", body: `{"specversion":"1.0","type":"dev.airlock.op.claimed.v1","source":"airlock/executor","id":"e1",` +
			`"time":"2025-01-02T03:04:05Z","subject":"` + testOpID + `","datacontenttype":"application/json","data":` + raw + `}`},
		{name: "data before attributes", ct: "application/cloudevents+json", body: `{"data":` + raw + `,"datacontenttype":"application/json","id":"e1",` +
			`"subject":"` + testOpID + `","time":"2025-01-02T03:04:05Z","type":"dev.airlock.op.claimed.v1","source":"airlock/executor","specversion":"1.0"}`},
		{name: "data_base64", ct: "application/cloudevents+json", body: `{"specversion":"1.0","type":"dev.airlock.op.claimed.v1","source":"airlock/executor","id":"e1",` +
			`"time":"2025-01-02T03:04:05Z","subject":"` + testOpID + `","datacontenttype":"application/json","data_base64":"` + b64 + `"}`},
		{name: "data_base64 first", ct: "application/cloudevents+json", body: `{"data_base64":"` + b64 + `","specversion":"1.0","type":"dev.airlock.op.claimed.v1",` +
			`"source":"airlock/executor","id":"e1","time":"2025-01-02T03:04:05Z","subject":"` + testOpID + `"}`},
		{name: "content type parameters", ct: "Application/CloudEvents+JSON; charset=utf-8", body: `{"specversion":"1.0","type":"dev.airlock.op.claimed.v1",` +
			`"source":"airlock/executor","id":"e1","time":"2025-01-02T03:04:05Z","subject":"` + testOpID + `","data":` + raw + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := events.Decode(structuredHeader(tt.ct), []byte(tt.body))
			require.NoError(t, err)
			assert.Equal(t, "1.0", ev.SpecVersion())
			assert.Equal(t, string(events.TypeClaimed), ev.Type())
			assert.Equal(t, "airlock/executor", ev.Source())
			assert.Equal(t, "e1", ev.ID())
			assert.Equal(t, testOpID, ev.Subject())
			assert.True(t, time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).Equal(ev.Time()))
			assert.JSONEq(t, raw, string(ev.Data()))

			data, err := events.DecodeData(ev)
			require.NoError(t, err)
			assert.Equal(t, want, data)

			// A structured event re-encodes to binary mode and decodes back.
			msg := events.Encode("airlock.v1.op.acme."+testOpID, ev)
			assert.Equal(t, "1.0", msg.Header.Get("ce-specversion"))
			back, err := events.Decode(msg.Header, msg.Data)
			require.NoError(t, err)
			assert.Equal(t, ev.ID(), back.ID())
			assert.Equal(t, ev.Subject(), back.Subject())
			data2, err := events.DecodeData(back)
			require.NoError(t, err)
			assert.Equal(t, want, data2)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good := func() nats.Header {
		h := nats.Header{}
		h.Set("ce-specversion", "1.0")
		h.Set("ce-type", string(events.TypeDecided))
		h.Set("ce-source", "airlock/gate")
		h.Set("ce-id", "abc")
		h.Set("ce-time", "2025-01-02T03:04:05Z")
		h.Set("ce-subject", testOpID)
		h.Set("Content-Type", "application/json")
		return h
	}
	body := []byte(`{}`)
	// The good headers decode: each case below breaks exactly one thing.
	_, err := events.Decode(good(), body)
	require.NoError(t, err)

	structured := func() nats.Header { return structuredHeader(events.ContentTypeStructured) }
	tests := []struct {
		name   string
		header func() nats.Header
		body   string
		msg    string // a substring of the message
	}{
		{name: "no headers", header: func() nats.Header { return nil }, msg: "no ce-specversion"},
		{name: "no ce-specversion", header: func() nats.Header { h := good(); h.Del("ce-specversion"); return h }, msg: "no ce-specversion"},
		{name: "ce-id twice in different case", header: func() nats.Header {
			h := good()
			h["CE-ID"] = []string{"other"}
			return h
		}, msg: "more than once"},
		{name: "plain JSON", header: func() nats.Header { return structuredHeader("application/json") }, body: `{"specversion":"1.0"}`, msg: "no ce-specversion"},
		{name: "specversion 0.3", header: func() nats.Header { h := good(); h.Set("ce-specversion", "0.3"); return h }, msg: `unsupported specversion (3 bytes), want 1.0`},
		{name: "specversion 2.0", header: func() nats.Header { h := good(); h.Set("ce-specversion", "2.0"); return h }, msg: `unsupported specversion (3 bytes)`},
		{name: "specversion 1", header: func() nats.Header { h := good(); h.Set("ce-specversion", "1"); return h }, msg: `unsupported specversion (1 bytes)`},
		{name: "missing ce-id", header: func() nats.Header { h := good(); h.Del("ce-id"); return h }, msg: "id"},
		{name: "empty ce-id", header: func() nats.Header { h := good(); h.Set("ce-id", ""); return h }, msg: "id"},
		{name: "missing ce-source", header: func() nats.Header { h := good(); h.Del("ce-source"); return h }, msg: "source"},
		{name: "missing ce-type", header: func() nats.Header { h := good(); h.Del("ce-type"); return h }, msg: "type"},
		{name: "blank ce-type", header: func() nats.Header { h := good(); h.Set("ce-type", "%20"); return h }, msg: "type"},
		{name: "bad ce-time words", header: func() nats.Header { h := good(); h.Set("ce-time", "yesterday"); return h }, msg: `ce-time (9 bytes) is not RFC 3339`},
		{name: "bad ce-time no zone", header: func() nats.Header { h := good(); h.Set("ce-time", "2025-01-02T03:04:05"); return h }, msg: "not RFC 3339"},
		{name: "bad ce-time month 13", header: func() nats.Header { h := good(); h.Set("ce-time", "2025-13-02T03:04:05Z"); return h }, msg: "not RFC 3339"},
		{name: "bad ce-time space", header: func() nats.Header { h := good(); h.Set("ce-time", "2025-01-02 03:04:05Z"); return h }, msg: "not RFC 3339"},
		{name: "ce-time before year 0 in UTC", header: func() nats.Header { h := good(); h.Set("ce-time", "0000-01-01T00:00:00+01:00"); return h }, msg: "outside years 0000-9999 in UTC"},
		{name: "ce-time after year 9999 in UTC", header: func() nats.Header { h := good(); h.Set("ce-time", "9999-12-31T23:00:00-02:00"); return h }, msg: "outside years 0000-9999 in UTC"},
		{name: "empty ce-time", header: func() nats.Header { h := good(); h.Set("ce-time", ""); return h }, msg: "not RFC 3339"},
		{name: "percent at end", header: func() nats.Header { h := good(); h.Set("ce-subject", "op%"); return h }, msg: "bad percent-encoding"},
		{name: "percent one digit", header: func() nats.Header { h := good(); h.Set("ce-subject", "op%4"); return h }, msg: "bad percent-encoding"},
		{name: "percent non-hex", header: func() nats.Header { h := good(); h.Set("ce-source", "a%zzb"); return h }, msg: "bad percent-encoding"},
		{name: "percent half hex", header: func() nats.Header { h := good(); h.Set("ce-id", "%4g"); return h }, msg: "bad percent-encoding"},
		{name: "percent in extension", header: func() nats.Header { h := good(); h.Set("ce-trace", "%%"); return h }, msg: "bad percent-encoding"},
		{name: "percent in time", header: func() nats.Header { h := good(); h.Set("ce-time", "2025%"); return h }, msg: "bad percent-encoding"},
		{name: "bad extension name", header: func() nats.Header { h := good(); h.Set("ce-trace_id", "x"); return h }, msg: "binary CloudEvent"},
		{name: "datacontenttype disagrees with Content-Type", header: func() nats.Header { h := good(); h.Set("ce-datacontenttype", "text/plain"); return h }, msg: "disagree"},
		{name: "bad content type", header: func() nats.Header { h := good(); h.Set("Content-Type", "json;;;"); return h }, msg: "binary CloudEvent"},

		{name: "structured not JSON", header: func() nats.Header { return structured() }, body: `not json`, msg: "structured CloudEvent"},
		{name: "structured empty", header: func() nats.Header { return structured() }, body: ``, msg: "structured CloudEvent"},
		{name: "structured array", header: func() nats.Header { return structured() }, body: `[1]`, msg: "structured CloudEvent"},
		{name: "structured no specversion", header: func() nats.Header { return structured() },
			body: `{"type":"dev.airlock.op.decided.v1","source":"s","id":"1"}`, msg: "structured CloudEvent"},
		{name: "structured specversion 0.3", header: func() nats.Header { return structured() },
			body: `{"specversion":"0.3","type":"dev.airlock.op.decided.v1","source":"s","id":"1"}`, msg: `unsupported specversion (3 bytes), want 1.0`},
		{name: "structured specversion 2.0", header: func() nats.Header { return structured() },
			body: `{"specversion":"2.0","type":"dev.airlock.op.decided.v1","source":"s","id":"1"}`, msg: "structured CloudEvent"},
		{name: "structured missing id", header: func() nats.Header { return structured() },
			body: `{"specversion":"1.0","type":"dev.airlock.op.decided.v1","source":"s"}`, msg: "id"},
		{name: "structured missing source", header: func() nats.Header { return structured() },
			body: `{"specversion":"1.0","type":"dev.airlock.op.decided.v1","id":"1"}`, msg: "source"},
		{name: "structured missing type", header: func() nats.Header { return structured() },
			body: `{"specversion":"1.0","source":"s","id":"1"}`, msg: "type"},
		{name: "structured bad time", header: func() nats.Header { return structured() },
			body: `{"specversion":"1.0","type":"t","source":"s","id":"1","time":"noon"}`, msg: "structured CloudEvent"},
		{name: "structured time after year 9999 in UTC", header: func() nats.Header { return structured() },
			body: `{"specversion":"1.0","type":"t","source":"s","id":"1","time":"9999-12-31T23:59:59-00:01"}`, msg: "outside years 0000-9999 in UTC"},
		{name: "structured bad base64", header: func() nats.Header { return structured() },
			body: `{"specversion":"1.0","type":"t","source":"s","id":"1","data_base64":"!!!"}`, msg: "structured CloudEvent"},
		// The SDK panics on a one-byte non-string data_base64; Decode must not.
		{name: "structured numeric data_base64", header: func() nats.Header { return structured() },
			body: `{"specversion":"1.0","type":"t","source":"s","id":"1","data_base64":1}`, msg: "structured CloudEvent"},
		{name: "structured numeric data_base64 first", header: func() nats.Header { return structured() },
			body: `{"data_base64":1,"specversion":"1.0","type":"t","source":"s","id":"1"}`, msg: "structured CloudEvent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := events.Decode(tt.header(), []byte(tt.body))
			requireCode(t, err, events.CodeInvalidEvent)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Equal(t, event.Event{}, ev)
		})
	}
}

func TestDecodeData(t *testing.T) {
	mk := func(typ, ct, data string) event.Event {
		ev := event.New()
		ev.SetType(typ)
		ev.SetSource("airlock/test")
		ev.SetID("1")
		if ct != "" {
			ev.SetDataContentType(ct)
		}
		ev.DataEncoded = []byte(data)
		return ev
	}
	tests := []struct {
		name string
		ev   event.Event
		code events.Code
		msg  string
	}{
		{name: "unknown type", ev: mk("dev.airlock.op.teleported.v1", "application/json", `{}`), code: events.CodeUnknownEventType, msg: `event type (28 bytes) is not one of`},
		{name: "future version", ev: mk("dev.airlock.op.decided.v2", "application/json", `{}`), code: events.CodeUnknownEventType},
		{name: "empty type", ev: mk("", "application/json", `{}`), code: events.CodeUnknownEventType},
		{name: "long unknown type truncated", ev: mk(strings.Repeat("x", 500), "", `{}`), code: events.CodeUnknownEventType, msg: "(500 bytes)"},
		{name: "unknown type wins over bad data", ev: mk("x", "application/json", `not json`), code: events.CodeUnknownEventType},
		{name: "non-JSON data", ev: mk(string(events.TypeDecided), "application/json", `decided!`), code: events.CodeInvalidEvent, msg: "decided data"},
		{name: "empty data", ev: mk(string(events.TypeCompleted), "application/json", ``), code: events.CodeInvalidEvent, msg: "completed data"},
		{name: "truncated data", ev: mk(string(events.TypeRequested), "application/json", `{"workspace":"a"`), code: events.CodeInvalidEvent, msg: "requested data"},
		{name: "wrong field type", ev: mk(string(events.TypeClaimed), "application/json", `{"op_id":1}`), code: events.CodeInvalidEvent, msg: "claimed data"},
		{name: "negative sequence", ev: mk(string(events.TypeScrubbed), "application/json", `{"request_seq":-1}`), code: events.CodeInvalidEvent},
		{name: "array data", ev: mk(string(events.TypeHeld), "application/json", `[]`), code: events.CodeInvalidEvent},
		{name: "text data", ev: mk(string(events.TypeHeld), "text/plain", `{}`), code: events.CodeInvalidEvent, msg: `data content type (10 bytes), want application/json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.DecodeData(tt.ev)
			requireCode(t, err, tt.code)
			assert.Nil(t, got)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestDecodeDataEveryType(t *testing.T) {
	want := map[events.Type]any{
		events.TypeRequested:    &events.Request{},
		events.TypeRejected:     &events.Rejected{},
		events.TypeDecided:      &events.Decided{},
		events.TypeHeld:         &events.Held{},
		events.TypeGranted:      &events.Granted{},
		events.TypeDenied:       &events.Denied{},
		events.TypeExpired:      &events.Expired{},
		events.TypeClaimed:      &events.Claimed{},
		events.TypeStarted:      &events.Started{},
		events.TypeCompleted:    &events.Completed{},
		events.TypeFailed:       &events.Failed{},
		events.TypeAmbiguous:    &events.Ambiguous{},
		events.TypeScrubbed:     &events.Scrubbed{},
		events.TypeResultErased: &events.ResultErased{},
		events.TypeModeSet:      &events.ModeSet{},
		events.TypePolicyLoaded: &events.PolicyLoaded{},
	}
	require.Len(t, events.AllTypes, len(want))
	for _, typ := range events.AllTypes {
		t.Run(typ.Short(), func(t *testing.T) {
			require.Contains(t, want, typ)
			assert.True(t, typ.Known())
			assert.IsType(t, want[typ], events.NewPayload(typ))

			ev, err := events.NewEventRaw(typ, "airlock/test", "", "1", []byte(`{"op_id":"`+testOpID+`","workspace":"acme"}`))
			require.NoError(t, err)
			got, err := events.DecodeData(ev)
			require.NoError(t, err)
			assert.Equal(t, reflect.TypeOf(want[typ]), reflect.TypeOf(got))

			h, isOp := events.IsOpEvent(got)
			switch typ {
			case events.TypeRequested, events.TypeRejected, events.TypeModeSet, events.TypePolicyLoaded:
				assert.False(t, isOp)
				assert.Equal(t, events.OpHeader{}, h)
			default:
				assert.True(t, isOp)
				assert.Equal(t, events.OpHeader{OpID: testOpID, Workspace: "acme"}, h)
			}
		})
	}
	assert.Nil(t, events.NewPayload("dev.airlock.op.unknown.v1"))
	assert.False(t, events.Type("dev.airlock.op.unknown.v1").Known())
}

func TestTypeShort(t *testing.T) {
	tests := []struct {
		name string
		typ  events.Type
		want string
	}{
		{name: "requested", typ: events.TypeRequested, want: "requested"},
		{name: "rejected", typ: events.TypeRejected, want: "rejected"},
		{name: "decided", typ: events.TypeDecided, want: "decided"},
		{name: "held", typ: events.TypeHeld, want: "held"},
		{name: "granted", typ: events.TypeGranted, want: "granted"},
		{name: "denied", typ: events.TypeDenied, want: "denied"},
		{name: "expired", typ: events.TypeExpired, want: "expired"},
		{name: "claimed", typ: events.TypeClaimed, want: "claimed"},
		{name: "completed", typ: events.TypeCompleted, want: "completed"},
		{name: "failed", typ: events.TypeFailed, want: "failed"},
		{name: "ambiguous", typ: events.TypeAmbiguous, want: "ambiguous"},
		{name: "scrubbed", typ: events.TypeScrubbed, want: "scrubbed"},
		{name: "short string", typ: "x", want: "x"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.typ.Short())
			assert.False(t, seen[tt.want], "short names are unique")
			seen[tt.want] = true
		})
	}
}

func TestEncodeDefaultsContentType(t *testing.T) {
	ev := event.New()
	ev.SetType(string(events.TypeDecided))
	ev.SetSource("airlock/gate")
	ev.SetID("1")
	ev.DataEncoded = []byte(`{}`)
	msg := events.Encode("s", ev)
	assert.Equal(t, events.ContentTypeJSON, msg.Header.Get(events.HeaderContentType))
	assert.Empty(t, msg.Header.Get("ce-time"), "zero time is not sent")
	assert.Empty(t, msg.Header.Get("ce-subject"))
	var m map[string]any
	require.NoError(t, json.Unmarshal(msg.Data, &m))
}

func TestDecodeHeaderNamesIgnoreCase(t *testing.T) {
	ev, err := events.NewEventRaw(events.TypeRequested, "src", "", "id-7", []byte(`{}`))
	require.NoError(t, err)
	m := events.Encode("s", ev)
	h := nats.Header{}
	for k, v := range m.Header {
		h[strings.ToUpper(k)] = v
	}
	got, err := events.Decode(h, m.Data)
	require.NoError(t, err)
	assert.Equal(t, "id-7", got.ID())
	assert.Equal(t, string(events.TypeRequested), got.Type())
}

// NewMessage writes what Encode writes for the same event.
func TestNewMessageMatchesEncode(t *testing.T) {
	data := []byte(`{"op_id":"op_1","workspace":"w"}`)
	ev, err := events.NewEventRaw(events.TypeClaimed, "airlock/executor", "op 1%", "id 7", data)
	require.NoError(t, err)
	want := events.Encode("airlock.v1.op.w.op_1.t.claimed", ev)
	got := events.NewMessage("airlock.v1.op.w.op_1.t.claimed", events.TypeClaimed, "airlock/executor", "op 1%", "id 7", data)
	assert.Equal(t, want.Subject, got.Subject)
	assert.Equal(t, want.Data, got.Data)
	for k, v := range want.Header {
		if k == "ce-time" {
			continue
		}
		assert.Equal(t, v, got.Header[k], k)
	}
	assert.Len(t, got.Header, len(want.Header))
	back, err := events.Decode(got.Header, got.Data)
	require.NoError(t, err)
	assert.Equal(t, "id 7", back.ID())
	assert.Equal(t, "airlock/executor", back.Source())
	assert.WithinDuration(t, time.Now(), back.Time(), time.Minute)
}

// A rejection is recorded in AIRLOCK_OPS, which outlives the request:
// its message never quotes what the agent sent, whichever part is bad.
func TestRejectionsNeverQuoteInput(t *testing.T) {
	const secret = "s3cr3tTOKENx"
	binary := func(set map[string]string) nats.Header {
		h := nats.Header{}
		for k, v := range map[string]string{"ce-specversion": "1.0", "ce-type": string(events.TypeRequested), "ce-source": "s", "ce-id": "1", "Content-Type": "application/json"} {
			h.Set(k, v)
		}
		for k, v := range set {
			h.Set(k, v)
		}
		return h
	}
	req := func(mut func(*events.Request)) string {
		r := events.Request{Workspace: "ws", Agent: "agent", Tool: "echo", Args: json.RawMessage(`{}`)}
		mut(&r)
		b, err := json.Marshal(r)
		require.NoError(t, err)
		return string(b)
	}
	cases := []struct {
		name   string
		header nats.Header
		body   string
	}{
		{"specversion", binary(map[string]string{"ce-specversion": secret}), `{}`},
		{"content type without specversion", nats.Header{"Content-Type": {secret}}, `{}`},
		{"structured specversion", nats.Header{"Content-Type": {events.ContentTypeStructured}}, `{"specversion":"` + secret + `","type":"t","source":"s","id":"1"}`},
		{"structured not JSON", nats.Header{"Content-Type": {events.ContentTypeStructured}}, `{"specversion":` + secret + `}`},
		{"ce-time", binary(map[string]string{"ce-time": secret}), `{}`},
		{"percent-encoding", binary(map[string]string{"ce-source": secret + "%zz"}), `{}`},
		{"type", binary(map[string]string{"ce-type": "dev." + secret}), `{}`},
		{"data content type", binary(map[string]string{"Content-Type": "text/" + secret}), `{}`},
		{"data not JSON", binary(nil), `{"workspace":` + secret + `}`},
		{"data number where a string is wanted", binary(nil), `{"workspace":1234` + "5678" + `}`},
		{"workspace name", binary(nil), req(func(r *events.Request) { r.Workspace = secret + " x" })},
		{"agent name", binary(nil), req(func(r *events.Request) { r.Agent = "A" + secret })},
		{"tool name", binary(nil), req(func(r *events.Request) { r.Tool = strings.Repeat(secret, 10) })},
		{"idempotency key", binary(nil), req(func(r *events.Request) { r.IdempotencyKey = secret + " " })},
		{"args", binary(nil), `{"workspace":"ws","agent":"agent","tool":"echo","args":{"a":` + secret + `}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// What the gate does with a request message.
			err := func() error {
				ev, err := events.Decode(c.header, []byte(c.body))
				if err != nil {
					return err
				}
				data, err := events.DecodeData(ev)
				if err != nil {
					return err
				}
				return data.(*events.Request).Validate()
			}()
			require.Error(t, err)
			assert.NotContains(t, err.Error(), secret[:6])
			assert.NotContains(t, err.Error(), "12345678")
		})
	}
}

// TestNewMessageHeadersStandApart adds to each header NewMessage writes
// and finds the others as they were: its values share one allocation.
func TestNewMessageHeadersStandApart(t *testing.T) {
	msg := events.NewMessage("airlock.v1.op.ws.op_1.echo.decided", events.TypeDecided, "src", "subj", "id-1", []byte(`{}`))
	want := nats.Header{}
	for k, v := range msg.Header {
		want[k] = append([]string(nil), v...)
	}
	for k := range msg.Header {
		msg.Header.Add(k, "extra")
		want[k] = append(want[k], "extra")
		require.Equal(t, want, msg.Header, "after adding to %s", k)
	}
}
