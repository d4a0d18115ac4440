package events_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/airlock-dev/airlock/events"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/. Run a fuzzer with
//
//	go test -run='^$' -fuzz=FuzzCanonical -fuzztime=20s ./events/

// FuzzCanonical: Canonical never panics; what it accepts it turns into
// valid, compact, UTF-8 JSON with the same value, which is its own
// canonical form.
func FuzzCanonical(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := events.Canonical(in)
		if err != nil {
			if out != nil {
				t.Fatalf("error %v with output %q", err, out)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Canonical(%q) = %q: not valid JSON", in, out)
		}
		if !json.Valid(in) {
			t.Fatalf("Canonical accepted invalid JSON %q", in)
		}
		if !utf8.Valid(out) {
			t.Fatalf("Canonical(%q) = %q: not UTF-8", in, out)
		}
		again, err := events.Canonical(out)
		if err != nil {
			t.Fatalf("Canonical(%q) = %q, which it refuses: %v", in, out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q -> %q -> %q", in, out, again)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, out); err != nil || !bytes.Equal(compact.Bytes(), out) {
			t.Fatalf("output %q has insignificant white space", out)
		}
		var a, b any
		if err := json.Unmarshal(in, &a); err != nil {
			t.Fatalf("encoding/json refuses accepted input %q: %v", in, err)
		}
		if err := json.Unmarshal(out, &b); err != nil {
			t.Fatalf("encoding/json refuses output %q: %v", out, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("value changed: %q -> %q", in, out)
		}
	})
}

// parseHeaders reads "Key: value" lines into a NATS header.
func parseHeaders(s string) nats.Header {
	h := nats.Header{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		h.Add(k, strings.TrimPrefix(v, " "))
	}
	return h
}

// FuzzDecode: Decode never panics and refuses with INVALID_EVENT only; an
// event it accepts is a valid CloudEvents 1.0 event that survives Encode
// and Decode unchanged, and DecodeData refuses it only with
// UNKNOWN_EVENT_TYPE or INVALID_EVENT.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, headers string, body []byte) {
		h := parseHeaders(headers)
		ev, err := events.Decode(h, body)
		if err != nil {
			if c := events.CodeOf(err); c != events.CodeInvalidEvent {
				t.Fatalf("Decode error code %s: %v", c, err)
			}
			return
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("Decode returned an invalid event: %v", err)
		}
		if ev.SpecVersion() != "1.0" {
			t.Fatalf("Decode accepted specversion %q", ev.SpecVersion())
		}
		data, err := events.DecodeData(ev)
		switch c := events.CodeOf(err); c {
		case "":
			if data == nil || !events.Type(ev.Type()).Known() {
				t.Fatalf("DecodeData(%s) = %v", ev.Type(), data)
			}
		case events.CodeUnknownEventType, events.CodeInvalidEvent:
			if data != nil {
				t.Fatalf("DecodeData returned %v with error %v", data, err)
			}
		default:
			t.Fatalf("DecodeData error code %s: %v", c, err)
		}

		ct := ev.DataContentType()
		if mt := ev.DataMediaType(); mt == events.ContentTypeStructured {
			// Binary mode cannot carry data of the structured-mode
			// content type: a receiver reads it as a structured event.
			return
		}
		if ct == "" {
			ct = events.ContentTypeJSON
		}
		msg := events.Encode("airlock.v1.fuzz", ev)
		back, err := events.Decode(msg.Header, msg.Data)
		if err != nil {
			t.Fatalf("re-decoding %v: %v", msg.Header, err)
		}
		// The SDK's setters, which binary mode uses, trim white space
		// from type, id and subject; its JSON reader does not.
		trim := strings.TrimSpace
		for _, c := range []struct{ name, a, b string }{
			{"type", trim(ev.Type()), back.Type()},
			{"source", ev.Source(), back.Source()},
			{"id", trim(ev.ID()), back.ID()},
			{"subject", trim(ev.Subject()), back.Subject()},
			{"dataschema", ev.DataSchema(), back.DataSchema()},
			{"datacontenttype", ct, back.DataContentType()},
			{"data", string(ev.Data()), string(back.Data())},
			{"extensions", extString(ev.Extensions()), extString(back.Extensions())},
		} {
			if c.a != c.b {
				t.Fatalf("%s changed in a round trip: %q -> %q", c.name, c.a, c.b)
			}
		}
		if !ev.Time().Equal(back.Time()) {
			t.Fatalf("time changed in a round trip: %v -> %v", ev.Time(), back.Time())
		}
		// After one normalization, Encode and Decode are exact inverses.
		msg2 := events.Encode("airlock.v1.fuzz", back)
		back2, err := events.Decode(msg2.Header, msg2.Data)
		if err != nil {
			t.Fatalf("re-decoding %v: %v", msg2.Header, err)
		}
		if again := events.Encode("airlock.v1.fuzz", back2); !reflect.DeepEqual(again.Header, msg2.Header) || !bytes.Equal(again.Data, msg2.Data) {
			t.Fatalf("Encode is not stable: %v -> %v", msg2.Header, again.Header)
		}
	})
}

func extString(m map[string]any) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s=%v;", k, m[k])
	}
	return b.String()
}

// validName is the name rule written out by hand:
// [a-z0-9][a-z0-9_-]{0,63}.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// FuzzRequestValidate: Validate never panics, returns the code the rules
// give in the order names, idempotency key, args, size; a valid request
// keeps its fingerprint through Validate again and through the JSON that
// carries it from the client to the gate.
func FuzzRequestValidate(f *testing.F) {
	f.Fuzz(func(t *testing.T, ws, agent, tool, key string, args []byte) {
		r := events.Request{Workspace: ws, Agent: agent, Tool: tool, IdempotencyKey: key, Args: args}
		err := r.Validate()

		var want events.Code
		canon, cerr := events.Canonical(args)
		switch {
		case !validName(ws) || !validName(agent) || !validName(tool):
			want = events.CodeInvalidName
		case len(key) > events.MaxIdempotencyKeyBytes || strings.IndexFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0:
			want = events.CodeInvalidIdempotencyKey
		case len(bytes.TrimSpace(args)) == 0 || cerr != nil:
			want = events.CodeInvalidArgs
		case len(canon) > events.MaxArgsBytes:
			want = events.CodeArgsTooLarge
		}
		if got := events.CodeOf(err); got != want {
			t.Fatalf("Validate(%q, %q, %q, %q, %q) code %q, want %q (%v)", ws, agent, tool, key, args, got, want, err)
		}
		if err != nil {
			if !bytes.Equal(r.Args, args) {
				t.Fatalf("failed Validate changed args")
			}
			return
		}
		if !bytes.Equal(r.Args, canon) {
			t.Fatalf("args %q, want canonical %q", r.Args, canon)
		}
		fp := r.Fingerprint()
		if id := events.OpID(fp); !events.ValidOpID(id) {
			t.Fatalf("invalid op id %q", id)
		}
		if err := r.Validate(); err != nil || r.Fingerprint() != fp {
			t.Fatalf("second Validate: %v, fingerprint changed %v", err, r.Fingerprint() != fp)
		}
		body, err := json.Marshal(&r)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var got events.Request
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("unmarshal %q: %v", body, err)
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("request %q does not validate after JSON: %v", body, err)
		}
		if got.Fingerprint() != fp {
			t.Fatalf("fingerprint changed through JSON %q", body)
		}
	})
}
