package events_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/events"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		// Structure and white space.
		{name: "scalar true", in: `true`, want: `true`},
		{name: "scalar false", in: `false`, want: `false`},
		{name: "scalar null", in: `null`, want: `null`},
		{name: "empty object", in: ` { } `, want: `{}`},
		{name: "empty array", in: "[\n]", want: `[]`},
		{name: "white space removed", in: " \t\r\n{ \"b\" : 1 ,\n\t\"a\" : [ 1 , 2 , { } ] }\n ", want: `{"a":[1,2,{}],"b":1}`},
		{name: "nested objects sorted", in: `{"z":{"y":1,"x":2},"a":[{"d":1,"c":2}]}`, want: `{"a":[{"c":2,"d":1}],"z":{"x":2,"y":1}}`},
		{name: "array order kept", in: `[3,1,2]`, want: `[3,1,2]`},
		{name: "prefix key first", in: `{"ab":1,"a":2,"":3}`, want: `{"":3,"a":2,"ab":1}`},

		// Key order: UTF-16 code units, not code points or UTF-8 bytes.
		{
			name: "RFC 8785 3.2.3 sorting example",
			in: `{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh",` +
				`"1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			want: `{"\r":"Carriage Return","1":"One","` + "\u0080" + `":"Control","ö":"Latin Small Letter O With Diaeresis",` +
				`"€":"Euro Sign","😀":"Emoji: Grinning Face","` + "\ufb33" + `":"Hebrew Letter Dalet With Dagesh"}`,
		},
		// U+1F600 is D83D DE00 in UTF-16, below U+E000; in UTF-8 (F0...) it
		// sorts after U+E000 (EE...).
		{name: "non-BMP key before U+E000", in: `{"\ue000":1,"😀":2}`, want: `{"😀":2,"` + "\ue000" + `":1}`},
		{name: "non-BMP key before U+FFFF", in: `{"\uffff":1,"\ud800\udc00":2}`, want: `{"` + "\U00010000" + `":2,"` + "\uffff" + `":1}`},
		{name: "non-BMP key after U+D7FF", in: `{"😀":1,"\ud7ff":2}`, want: `{"` + "\ud7ff" + `":2,"😀":1}`},

		// Strings: minimal escapes.
		{
			name: "RFC 8785 3.2.2 string",
			in:   `"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"`,
			want: `"€$\u000f\nA'B\"\\\\\"/"`,
		},
		{name: "control characters", in: `"\u0000\u0001\u0007\u000b\u000e\u001F\u001f"`, want: `"\u0000\u0001\u0007\u000b\u000e\u001f\u001f"`},
		{name: "short escapes", in: `"\u0008\u000c\u000a\u000d\u0009"`, want: `"\b\f\n\r\t"`},
		{name: "short escapes kept", in: `"\b\f\n\r\t"`, want: `"\b\f\n\r\t"`},
		{name: "DEL literal", in: `"\u007f"`, want: "\"\x7f\""},
		{name: "U+2028 and U+2029 literal", in: `"\u2028\u2029"`, want: "\"\u2028\u2029\""},
		{name: "solidus unescaped", in: `"a\/b"`, want: `"a/b"`},
		{name: "escaped letters unescaped", in: `"\u0041\u00e9\u4e2d"`, want: `"Aé中"`},
		{name: "surrogate pair literal", in: `"\uD83D\uDE00"`, want: `"😀"`},
		{name: "raw UTF-8 kept", in: `"héllo 世界 😀"`, want: `"héllo 世界 😀"`},
		{name: "escaped key", in: `{"\u0061":1,"\n":2}`, want: `{"\n":2,"a":1}`},

		// Numbers: ECMAScript Number.prototype.toString.
		{name: "integer", in: `100`, want: `100`},
		{name: "negative decimal", in: `-1.25`, want: `-1.25`},
		{name: "trailing zeros", in: `4.50`, want: `4.5`},
		{name: "integral decimal", in: `1.0`, want: `1`},
		{name: "1.5E3", in: `1.5E3`, want: `1500`},
		{name: "123e-2", in: `123e-2`, want: `1.23`},
		{name: "2e-3", in: `2e-3`, want: `0.002`},
		{name: "1e-6 plain", in: `1e-6`, want: `0.000001`},
		{name: "0.000001", in: `0.000001`, want: `0.000001`},
		{name: "1.2e-6", in: `1.2e-6`, want: `0.0000012`},
		{name: "1e-7 exponent", in: `1e-7`, want: `1e-7`},
		{name: "0.0000001", in: `0.0000001`, want: `1e-7`},
		{name: "1e-27", in: `0.000000000000000000000000001`, want: `1e-27`},
		{name: "1e20 plain", in: `1e20`, want: `100000000000000000000`},
		{name: "1e21 exponent", in: `1e21`, want: `1e+21`},
		{name: "1E30", in: `1E30`, want: `1e+30`},
		{name: "1e+2", in: `1e+2`, want: `100`},
		{name: "negative zero", in: `-0`, want: `0`},
		{name: "negative zero decimal", in: `-0.0`, want: `0`},
		{name: "zero with exponent", in: `0e10`, want: `0`},
		{name: "zero with huge exponent", in: `0.0e-99999999999999999999`, want: `0`},
		{name: "2^53", in: `9007199254740992`, want: `9007199254740992`},
		{name: "exact 21-digit double", in: `123456789012345680000`, want: `123456789012345680000`},
		{name: "min subnormal", in: `5e-324`, want: `5e-324`},
		{name: "max double", in: `1.7976931348623157e308`, want: `1.7976931348623157e+308`},
		{name: "0.1", in: `0.1`, want: `0.1`},
		{name: "long exact decimal", in: `1424953923781206.2`, want: `1424953923781206.2`},
		{name: "long digits exact value", in: `1.00000000000000000000e0`, want: `1`},
		{
			name: "RFC 8785 3.2.2 numbers and literals",
			in:   `{"numbers":[333333333.3333333,1E30,4.50,2e-3,0.000000000000000000000000001],"literals":[null,true,false]}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.Canonical([]byte(tt.in))
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
			again, err := events.Canonical(got)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(again), "canonical form is a fixed point")
		})
	}
}

// TestCanonicalNumbersRFC8785 checks the IEEE 754 to string examples of RFC
// 8785 appendix B: the double with the given bits, written in Go's shortest
// form, must canonicalize to the ECMAScript form.
func TestCanonicalNumbersRFC8785(t *testing.T) {
	tests := []struct {
		name string
		bits uint64
		want string
	}{
		{name: "zero", bits: 0x0000000000000000, want: "0"},
		{name: "minus zero", bits: 0x8000000000000000, want: "0"},
		{name: "min pos number", bits: 0x0000000000000001, want: "5e-324"},
		{name: "min neg number", bits: 0x8000000000000001, want: "-5e-324"},
		{name: "max pos number", bits: 0x7fefffffffffffff, want: "1.7976931348623157e+308"},
		{name: "max neg number", bits: 0xffefffffffffffff, want: "-1.7976931348623157e+308"},
		{name: "max pos int", bits: 0x4340000000000000, want: "9007199254740992"},
		{name: "max neg int", bits: 0xc340000000000000, want: "-9007199254740992"},
		{name: "2^68", bits: 0x4430000000000000, want: "295147905179352830000"},
		{name: "below 1e23", bits: 0x44b52d02c7e14af5, want: "9.999999999999997e+22"},
		{name: "1e23", bits: 0x44b52d02c7e14af6, want: "1e+23"},
		{name: "above 1e23", bits: 0x44b52d02c7e14af7, want: "1.0000000000000001e+23"},
		{name: "below 1e21 a", bits: 0x444b1ae4d6e2ef4e, want: "999999999999999700000"},
		{name: "below 1e21 b", bits: 0x444b1ae4d6e2ef4f, want: "999999999999999900000"},
		{name: "1e21", bits: 0x444b1ae4d6e2ef50, want: "1e+21"},
		{name: "below 1e-6", bits: 0x3eb0c6f7a0b5ed8c, want: "9.999999999999997e-7"},
		{name: "1e-6", bits: 0x3eb0c6f7a0b5ed8d, want: "0.000001"},
		{name: "third a", bits: 0x41b3de4355555553, want: "333333333.3333332"},
		{name: "third b", bits: 0x41b3de4355555554, want: "333333333.33333325"},
		{name: "third c", bits: 0x41b3de4355555555, want: "333333333.3333333"},
		{name: "third d", bits: 0x41b3de4355555556, want: "333333333.3333334"},
		{name: "third e", bits: 0x41b3de4355555557, want: "333333333.33333343"},
		{name: "small negative", bits: 0xbecbf647612f3696, want: "-0.0000033333333333333333"},
		{name: "large fraction", bits: 0x43143ff3c1cb0959, want: "1424953923781206.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lit := strconv.FormatFloat(math.Float64frombits(tt.bits), 'g', -1, 64)
			got, err := events.Canonical([]byte(lit))
			require.NoError(t, err, "literal %s", lit)
			assert.Equal(t, tt.want, string(got), "literal %s", lit)
			got, err = events.Canonical([]byte(tt.want))
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
		})
	}
}

func TestCanonicalErrors(t *testing.T) {
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	nestedObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	tests := []struct {
		name string
		in   string
		want string // a substring of the error
	}{
		{name: "empty input", in: ``, want: "unexpected end of JSON"},
		{name: "only white space", in: " \n\t", want: "unexpected end of JSON"},
		{name: "invalid UTF-8 in string", in: "\"a\xffb\"", want: "not valid UTF-8"},
		{name: "invalid UTF-8 in key", in: "{\"\xc3\x28\":1}", want: "not valid UTF-8"},
		{name: "UTF-8 encoded surrogate", in: "\"\xed\xa0\x80\"", want: "not valid UTF-8"},
		{name: "truncated UTF-8", in: "\"\xe4\xb8\"", want: "not valid UTF-8"},
		{name: "lone high surrogate", in: `"\ud800"`, want: "lone UTF-16 surrogate"},
		{name: "lone low surrogate", in: `"\udc00"`, want: "lone UTF-16 surrogate"},
		{name: "high surrogate then text", in: `"\ud83dx"`, want: "lone UTF-16 surrogate"},
		{name: "high surrogate then BMP escape", in: `"\ud83d\u0041"`, want: "lone UTF-16 surrogate"},
		{name: "two high surrogates", in: `"\ud83d\ud83d"`, want: "lone UTF-16 surrogate"},
		{name: "reversed pair", in: `"\ude00\ud83d"`, want: "lone UTF-16 surrogate"},
		{name: "lone surrogate in key", in: `{"\uDFFF":1}`, want: "lone UTF-16 surrogate"},
		{name: "duplicate key", in: `{"a":1,"a":2}`, want: `duplicate object key at offset 7`},
		{name: "duplicate key via escape", in: `{"a":1,"\u0061":1}`, want: `duplicate object key at offset 7`},
		{name: "duplicate key nested", in: `[{"x":{"k":1,"k":1}}]`, want: `duplicate object key at offset 13`},
		{name: "trailing value", in: `{} {}`, want: "trailing data"},
		{name: "trailing number", in: `1 2`, want: "trailing data"},
		{name: "trailing bracket", in: `[1]]`, want: "trailing data"},
		{name: "trailing garbage", in: `true x`, want: "trailing data"},
		{name: "depth 65 arrays", in: nested(events.MaxJSONDepth + 1), want: "nesting deeper than 64"},
		{name: "depth 65 objects", in: nestedObj(events.MaxJSONDepth + 1), want: "nesting deeper than 64"},
		{name: "very deep", in: nested(10000), want: "nesting deeper than 64"},
		{name: "precision lost 20 digits", in: `12345678901234567890`, want: "number at offset 0 loses precision as a double"},
		{name: "precision lost 2^53+1", in: `9007199254740993`, want: "loses precision as a double"},
		{name: "precision lost decimal", in: `333333333.33333329`, want: "loses precision as a double"},
		{name: "precision lost in args", in: `{"id":[1,18446744073709551615]}`, want: "loses precision"},
		{name: "underflow", in: `1e-400`, want: "loses precision as a double"},
		{name: "huge negative exponent", in: `1e-999999`, want: "loses precision"},
		{name: "exponent overflows int64", in: `1e-99999999999999999999`, want: "loses precision"},
		{name: "long fraction", in: "0." + strings.Repeat("1", 100000), want: "loses precision"},
		{name: "huge exponent", in: `1e400`, want: "number at offset 0 out of range"},
		{name: "huge negative", in: `-1e400`, want: "out of range"},
		{name: "huge integer", in: "1" + strings.Repeat("0", 400), want: "out of range"},
		{name: "NaN", in: `NaN`, want: "invalid character"},
		{name: "Infinity", in: `Infinity`, want: "invalid character"},
		{name: "leading plus", in: `+1`, want: "invalid character"},
		{name: "leading zero", in: `01`, want: "trailing data"},
		{name: "bare dot", in: `.5`, want: "invalid character"},
		{name: "single quotes", in: `'a'`, want: "invalid character"},
		{name: "unquoted key", in: `{a:1}`, want: "invalid character"},
		{name: "trailing comma in array", in: `[1,]`, want: "invalid character"},
		{name: "trailing comma in object", in: `{"a":1,}`, want: "invalid character"},
		{name: "missing comma", in: `[1 2]`, want: "invalid character after array element at offset 3"},
		{name: "missing colon", in: `{"a" 1}`, want: "invalid character after object key at offset 5"},
		{name: "unterminated array", in: `[1,2`, want: "EOF"},
		{name: "unterminated string", in: `"abc`, want: "EOF"},
		{name: "bad escape", in: `"\x"`, want: "invalid character"},
		{name: "raw control character", in: "\"a\nb\"", want: "invalid character"},
		{name: "byte order mark", in: "\ufeff{}", want: "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.Canonical([]byte(tt.in))
			require.Error(t, err)
			assert.Nil(t, got)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// A refusal says where the args are wrong, never what they hold: the gate
// records its message in a request.rejected event.
func TestCanonicalErrorsQuoteNothing(t *testing.T) {
	for _, in := range []string{
		`{"SECRETKEY":1,"SECRETKEY":2}`, `{"k":12345678901234567891}`, `{"k":1e999}`,
		`{"k":"x" SECRETVALUE}`, `["SECRET",]`, `{SECRET:1}`,
	} {
		_, err := events.Canonical([]byte(in))
		require.Error(t, err, in)
		for _, secret := range []string{"SECRET", "1234567890123456789", "1e999", "'"} {
			assert.NotContains(t, err.Error(), secret, in)
		}
	}
}

func TestCanonicalDepthLimit(t *testing.T) {
	deepest := strings.Repeat("[", events.MaxJSONDepth) + strings.Repeat("]", events.MaxJSONDepth)
	got, err := events.Canonical([]byte(deepest))
	require.NoError(t, err)
	assert.Equal(t, deepest, string(got))

	obj := strings.Repeat(`{"a":`, events.MaxJSONDepth) + "1" + strings.Repeat("}", events.MaxJSONDepth)
	got, err = events.Canonical([]byte(obj))
	require.NoError(t, err)
	assert.Equal(t, obj, string(got))
}

// TestCanonicalSameValue checks that the canonical form keeps the value:
// decoding input and output gives the same Go value.
func TestCanonicalSameValue(t *testing.T) {
	in := `{"s":"a\u00e9\ud83d\ude00\t","n":[1.5e3,-0.25,1e21,7],"o":{"b":null,"a":[true,false]}}`
	out, err := events.Canonical([]byte(in))
	require.NoError(t, err)
	var a, b any
	require.NoError(t, json.Unmarshal([]byte(in), &a))
	require.NoError(t, json.Unmarshal(out, &b))
	assert.Equal(t, a, b)
}

func validRequest() events.Request {
	return events.Request{
		Workspace:      "acme",
		Agent:          "support-bot",
		Tool:           "send_email",
		Args:           json.RawMessage(`{"to":"ops@example.com","subject":"Disk almost full","body":"/var is at 93%"}`),
		IdempotencyKey: "ticket-4711",
	}
}

func TestFingerprintStable(t *testing.T) {
	a := validRequest()
	b := events.Request{
		Workspace: "acme", Agent: "support-bot", Tool: "send_email",
		Args: json.RawMessage(" {\n  \"body\" : \"/var is at 93\\u0025\",\n  \"subject\":\"Disk almost full\",\n" +
			"  \"to\":\"ops\\u0040example.com\"\n}\n"),
		IdempotencyKey: "ticket-4711",
	}
	require.NoError(t, a.Validate())
	require.NoError(t, b.Validate())
	assert.Equal(t, `{"body":"/var is at 93%","subject":"Disk almost full","to":"ops@example.com"}`, string(a.Args))
	assert.Equal(t, string(a.Args), string(b.Args))
	assert.Equal(t, a.Fingerprint(), b.Fingerprint())
	assert.Equal(t, a.FingerprintHex(), b.FingerprintHex())
	assert.Equal(t, events.OpID(a.Fingerprint()), events.OpID(b.Fingerprint()))

	// Numbers that mean the same are the same.
	c, d := validRequest(), validRequest()
	c.Args = json.RawMessage(`{"n":1500,"m":0.5}`)
	d.Args = json.RawMessage(`{"m":5e-1,"n":1.5E3}`)
	require.NoError(t, c.Validate())
	require.NoError(t, d.Validate())
	assert.Equal(t, c.FingerprintHex(), d.FingerprintHex())
}

func TestFingerprintValue(t *testing.T) {
	// The fingerprint is the SHA-256 of the canonical
	// {agent,args,idempotency_key,tool,workspace} object: pin it, so a
	// change to the derivation (which would change every op id) fails.
	r := events.Request{Workspace: "ws", Agent: "a", Tool: "t", Args: json.RawMessage(`{}`)}
	require.NoError(t, r.Validate())
	doc := `{"agent":"a","args":{},"idempotency_key":"","tool":"t","workspace":"ws"}`
	assert.Equal(t, events.Digest([]byte(doc)), "sha256:"+r.FingerprintHex())
	fp := r.Fingerprint()
	assert.Equal(t, "op_"+r.FingerprintHex()[:32], events.OpID(fp))
	assert.True(t, events.ValidOpID(events.OpID(fp)))
	assert.Len(t, r.FingerprintHex(), 64)
}

func TestFingerprintChangesWithEveryField(t *testing.T) {
	base := validRequest()
	require.NoError(t, base.Validate())
	tests := []struct {
		name   string
		mutate func(r *events.Request)
	}{
		{name: "workspace", mutate: func(r *events.Request) { r.Workspace = "acme2" }},
		{name: "agent", mutate: func(r *events.Request) { r.Agent = "support-bot2" }},
		{name: "tool", mutate: func(r *events.Request) { r.Tool = "send_emails" }},
		{name: "args value", mutate: func(r *events.Request) {
			r.Args = json.RawMessage(`{"to":"ops@example.com","subject":"Disk almost full","body":"/var is at 94%"}`)
		}},
		{name: "args extra member", mutate: func(r *events.Request) {
			r.Args = json.RawMessage(`{"to":"ops@example.com","subject":"Disk almost full","body":"/var is at 93%","cc":null}`)
		}},
		{name: "args number type", mutate: func(r *events.Request) { r.Args = json.RawMessage(`{"n":1}`) }},
		{name: "idempotency key", mutate: func(r *events.Request) { r.IdempotencyKey = "ticket-4712" }},
		{name: "idempotency key removed", mutate: func(r *events.Request) { r.IdempotencyKey = "" }},
		// Field boundaries are unambiguous: moving text between fields
		// changes the fingerprint.
		{name: "agent and tool shifted", mutate: func(r *events.Request) { r.Agent, r.Tool = "support-bot-send", "email" }},
	}
	seen := map[string]string{base.FingerprintHex(): "base"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			tt.mutate(&r)
			require.NoError(t, r.Validate())
			fp := r.FingerprintHex()
			assert.NotEqual(t, base.FingerprintHex(), fp)
			assert.NotEqual(t, events.OpID(base.Fingerprint()), events.OpID(r.Fingerprint()))
			prev, dup := seen[fp]
			assert.False(t, dup, "same fingerprint as %s", prev)
			seen[fp] = tt.name
		})
	}
	// Two requests differing only in {"n":1} vs {"n":"1"} differ.
	x, y := validRequest(), validRequest()
	x.Args, y.Args = json.RawMessage(`{"n":1}`), json.RawMessage(`{"n":"1"}`)
	require.NoError(t, x.Validate())
	require.NoError(t, y.Validate())
	assert.NotEqual(t, x.FingerprintHex(), y.FingerprintHex())
}

func TestRequestValidate(t *testing.T) {
	long := strings.Repeat("a", 64)
	// Canonical args of exactly MaxArgsBytes: {"a":"xxx..."} is 8 bytes
	// around the string.
	atLimit := `{"a":"` + strings.Repeat("x", events.MaxArgsBytes-8) + `"}`
	overLimit := `{"a":"` + strings.Repeat("x", events.MaxArgsBytes-7) + `"}`
	// Insignificant white space does not count against the limit.
	spacedAtLimit := `{ "a" : "` + strings.Repeat("x", events.MaxArgsBytes-8) + `" }` + strings.Repeat(" ", 1000)
	tests := []struct {
		name   string
		mutate func(r *events.Request)
		code   events.Code // "" for valid
	}{
		{name: "valid", mutate: func(r *events.Request) {}},
		{name: "valid minimal names", mutate: func(r *events.Request) { r.Workspace, r.Agent, r.Tool = "a", "0", "9" }},
		{name: "valid 64-char names", mutate: func(r *events.Request) { r.Workspace, r.Agent, r.Tool = long, long, long }},
		{name: "valid underscore and dash", mutate: func(r *events.Request) { r.Tool = "a_b-c__-" }},
		{name: "valid no idempotency key", mutate: func(r *events.Request) { r.IdempotencyKey = "" }},
		{name: "valid 256-byte idempotency key", mutate: func(r *events.Request) { r.IdempotencyKey = strings.Repeat("k", 256) }},
		{name: "valid printable key", mutate: func(r *events.Request) { r.IdempotencyKey = "!~#$%&'()*+,-./:;<=>?@[\\]^_`{|}" }},
		{name: "valid empty object args", mutate: func(r *events.Request) { r.Args = json.RawMessage(`{}`) }},
		{name: "valid scalar args", mutate: func(r *events.Request) { r.Args = json.RawMessage(` 42 `) }},
		{name: "valid args at limit", mutate: func(r *events.Request) { r.Args = json.RawMessage(atLimit) }},
		{name: "valid spaced args at limit", mutate: func(r *events.Request) { r.Args = json.RawMessage(spacedAtLimit) }},

		{name: "empty workspace", mutate: func(r *events.Request) { r.Workspace = "" }, code: events.CodeInvalidName},
		{name: "uppercase workspace", mutate: func(r *events.Request) { r.Workspace = "Acme" }, code: events.CodeInvalidName},
		{name: "65-char workspace", mutate: func(r *events.Request) { r.Workspace = long + "a" }, code: events.CodeInvalidName},
		{name: "workspace leading dash", mutate: func(r *events.Request) { r.Workspace = "-acme" }, code: events.CodeInvalidName},
		{name: "workspace leading underscore", mutate: func(r *events.Request) { r.Workspace = "_" }, code: events.CodeInvalidName},
		{name: "workspace with dot", mutate: func(r *events.Request) { r.Workspace = "ac.me" }, code: events.CodeInvalidName},
		{name: "workspace wildcard", mutate: func(r *events.Request) { r.Workspace = "*" }, code: events.CodeInvalidName},
		{name: "workspace trailing newline", mutate: func(r *events.Request) { r.Workspace = "acme\n" }, code: events.CodeInvalidName},
		{name: "workspace non-ASCII", mutate: func(r *events.Request) { r.Workspace = "acmé" }, code: events.CodeInvalidName},
		{name: "empty agent", mutate: func(r *events.Request) { r.Agent = "" }, code: events.CodeInvalidName},
		{name: "uppercase agent", mutate: func(r *events.Request) { r.Agent = "Bot" }, code: events.CodeInvalidName},
		{name: "65-char agent", mutate: func(r *events.Request) { r.Agent = long + "0" }, code: events.CodeInvalidName},
		{name: "agent leading dash", mutate: func(r *events.Request) { r.Agent = "-bot" }, code: events.CodeInvalidName},
		{name: "agent with space", mutate: func(r *events.Request) { r.Agent = "support bot" }, code: events.CodeInvalidName},
		{name: "empty tool", mutate: func(r *events.Request) { r.Tool = "" }, code: events.CodeInvalidName},
		{name: "uppercase tool", mutate: func(r *events.Request) { r.Tool = "SEND" }, code: events.CodeInvalidName},
		{name: "65-char tool", mutate: func(r *events.Request) { r.Tool = long + "_" }, code: events.CodeInvalidName},
		{name: "tool leading dash", mutate: func(r *events.Request) { r.Tool = "-send" }, code: events.CodeInvalidName},
		{name: "tool with slash", mutate: func(r *events.Request) { r.Tool = "fs/write" }, code: events.CodeInvalidName},
		// Names are checked before args.
		{name: "bad name and bad args", mutate: func(r *events.Request) { r.Tool, r.Args = "X", json.RawMessage(`{`) }, code: events.CodeInvalidName},

		{name: "257-byte idempotency key", mutate: func(r *events.Request) { r.IdempotencyKey = strings.Repeat("k", 257) }, code: events.CodeInvalidIdempotencyKey},
		{name: "idempotency key with space", mutate: func(r *events.Request) { r.IdempotencyKey = "ticket 4711" }, code: events.CodeInvalidIdempotencyKey},
		{name: "idempotency key with tab", mutate: func(r *events.Request) { r.IdempotencyKey = "ticket\t4711" }, code: events.CodeInvalidIdempotencyKey},
		{name: "idempotency key with DEL", mutate: func(r *events.Request) { r.IdempotencyKey = "ticket\x7f" }, code: events.CodeInvalidIdempotencyKey},
		{name: "idempotency key non-ASCII", mutate: func(r *events.Request) { r.IdempotencyKey = "tïcket" }, code: events.CodeInvalidIdempotencyKey},
		{name: "idempotency key only space", mutate: func(r *events.Request) { r.IdempotencyKey = " " }, code: events.CodeInvalidIdempotencyKey},

		{name: "missing args", mutate: func(r *events.Request) { r.Args = nil }, code: events.CodeInvalidArgs},
		{name: "white space args", mutate: func(r *events.Request) { r.Args = json.RawMessage(" \n\t ") }, code: events.CodeInvalidArgs},
		{name: "non-JSON args", mutate: func(r *events.Request) { r.Args = json.RawMessage(`to=ops`) }, code: events.CodeInvalidArgs},
		{name: "truncated args", mutate: func(r *events.Request) { r.Args = json.RawMessage(`{"to":`) }, code: events.CodeInvalidArgs},
		{name: "duplicate key args", mutate: func(r *events.Request) { r.Args = json.RawMessage(`{"to":"a","to":"b"}`) }, code: events.CodeInvalidArgs},
		{name: "imprecise number args", mutate: func(r *events.Request) { r.Args = json.RawMessage(`{"id":12345678901234567890}`) }, code: events.CodeInvalidArgs},
		{name: "invalid UTF-8 args", mutate: func(r *events.Request) { r.Args = json.RawMessage("\"\xff\"") }, code: events.CodeInvalidArgs},
		{name: "trailing data args", mutate: func(r *events.Request) { r.Args = json.RawMessage(`{} []`) }, code: events.CodeInvalidArgs},
		{name: "too deep args", mutate: func(r *events.Request) { r.Args = json.RawMessage(strings.Repeat("[", 65) + strings.Repeat("]", 65)) }, code: events.CodeInvalidArgs},

		{name: "args one byte over limit", mutate: func(r *events.Request) { r.Args = json.RawMessage(overLimit) }, code: events.CodeArgsTooLarge},
		{name: "args far over limit", mutate: func(r *events.Request) {
			r.Args = json.RawMessage(`[` + strings.Repeat(`1,`, events.MaxArgsBytes) + `1]`)
		}, code: events.CodeArgsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			tt.mutate(&r)
			before := r
			err := r.Validate()
			if tt.code == "" {
				require.NoError(t, err)
				assert.Equal(t, events.Code(""), events.CodeOf(err))
				canon, cerr := events.Canonical(before.Args)
				require.NoError(t, cerr)
				assert.Equal(t, string(canon), string(r.Args), "Validate stores the canonical args")
				assert.LessOrEqual(t, len(r.Args), events.MaxArgsBytes)
				return
			}
			require.Error(t, err)
			var e *events.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tt.code, e.Code)
			assert.Equal(t, tt.code, events.CodeOf(err))
			assert.ErrorIs(t, err, &events.Error{Code: tt.code})
			for _, other := range events.AllCodes {
				if other != tt.code {
					assert.NotErrorIs(t, err, &events.Error{Code: other})
				}
			}
			assert.False(t, e.Retryable)
			assert.True(t, strings.HasPrefix(err.Error(), string(tt.code)+": "), err.Error())
			assert.Equal(t, string(before.Args), string(r.Args), "a failed Validate leaves args alone")
		})
	}
}

func TestValidateIdempotent(t *testing.T) {
	r := validRequest()
	require.NoError(t, r.Validate())
	fp := r.Fingerprint()
	args := string(r.Args)
	require.NoError(t, r.Validate())
	assert.Equal(t, args, string(r.Args))
	assert.Equal(t, fp, r.Fingerprint())
	assert.Equal(t, "acme/support-bot/send_email", r.String())
}

func TestValidOpID(t *testing.T) {
	tests := []struct {
		name string
		id   string
		want bool
	}{
		{name: "valid", id: "op_0123456789abcdef0123456789abcdef", want: true},
		{name: "uppercase hex", id: "op_0123456789ABCDEF0123456789abcdef"},
		{name: "short", id: "op_0123456789abcdef0123456789abcde"},
		{name: "long", id: "op_0123456789abcdef0123456789abcdef0"},
		{name: "no prefix", id: "0123456789abcdef0123456789abcdef"},
		{name: "trailing newline", id: "op_0123456789abcdef0123456789abcdef\n"},
		{name: "empty", id: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, events.ValidOpID(tt.id))
		})
	}
}

func TestCodeOf(t *testing.T) {
	assert.Equal(t, events.Code(""), events.CodeOf(nil))
	assert.Equal(t, events.CodeInternal, events.CodeOf(assert.AnError))
	wrapped := fmt.Errorf("query: %w", events.Errorf(events.CodeNotFound, "op %s", "x"))
	assert.Equal(t, events.CodeNotFound, events.CodeOf(wrapped))
	assert.ErrorIs(t, wrapped, &events.Error{Code: events.CodeNotFound})
	assert.Equal(t, "NOT_FOUND", (&events.Error{Code: events.CodeNotFound}).Error())
	assert.Equal(t, "NOT_FOUND: op x", events.Errorf(events.CodeNotFound, "op %s", "x").Error())
}
