package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
)

// Args are an exec call's arguments: {"argv": [...], "timeout_ms": N?}.
type Args struct {
	// Argv is the program and its arguments; Argv[0] is run directly,
	// never through a shell.
	Argv []string `json:"argv"`
	// TimeoutMS is the call's timeout in milliseconds; 0 means the
	// configured default.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// ParseArgs decodes raw strictly: exactly the fields argv (a non-empty
// array of at most MaxArgv strings, MaxArgvBytes in all, none holding a
// NUL byte, argv[0] not empty) and optionally timeout_ms (an integer from
// 1 to maxTimeout in milliseconds); no other field, no field twice, no
// null, nothing after the object. Every refusal is an INVALID_ARGS
// *events.Error whose message names fields and positions, never a value
// or a field name from the args: the op's events store it.
func ParseArgs(raw []byte, maxTimeout time.Duration) (Args, error) {
	fields, err := objectFields(raw)
	if err != nil {
		return Args{}, invalid("args must be a JSON object: %v", err)
	}
	var a Args
	for i, f := range fields {
		switch f.name {
		case "argv", "timeout_ms":
		default:
			return Args{}, invalid("field %d has an unknown name (want argv, timeout_ms)", i+1)
		}
		if string(f.value) == "null" {
			return Args{}, invalid("%s must not be null", f.name)
		}
		switch f.name {
		case "argv":
			var argv []*string
			if err := json.Unmarshal(f.value, &argv); err != nil {
				return Args{}, invalid("argv must be an array of strings")
			}
			a.Argv = make([]string, len(argv))
			for i, s := range argv {
				if s == nil {
					return Args{}, invalid("argv[%d] is null", i)
				}
				a.Argv[i] = *s
			}
		case "timeout_ms":
			if err := json.Unmarshal(f.value, &a.TimeoutMS); err != nil {
				return Args{}, invalid("timeout_ms must be an integer")
			}
			if a.TimeoutMS <= 0 {
				return Args{}, invalid("timeout_ms must be positive")
			}
			if a.TimeoutMS > maxTimeout.Milliseconds() {
				return Args{}, invalid("timeout_ms is above the limit %d", maxTimeout.Milliseconds())
			}
		}
	}
	if len(a.Argv) == 0 {
		return Args{}, invalid("argv is missing or empty")
	}
	if len(a.Argv) > MaxArgv {
		return Args{}, invalid("argv has %d entries, limit %d", len(a.Argv), MaxArgv)
	}
	total := 0
	for i, s := range a.Argv {
		total += len(s)
		if strings.IndexByte(s, 0) >= 0 {
			return Args{}, invalid("argv[%d] holds a NUL byte", i)
		}
	}
	if total > MaxArgvBytes {
		return Args{}, invalid("argv is %d bytes, limit %d", total, MaxArgvBytes)
	}
	if a.Argv[0] == "" {
		return Args{}, invalid("argv[0] is empty")
	}
	return a, nil
}

// Timeout is the call's timeout: TimeoutMS, or def when it is 0.
func (a Args) Timeout(def time.Duration) time.Duration {
	if a.TimeoutMS == 0 {
		return def
	}
	return time.Duration(a.TimeoutMS) * time.Millisecond
}

type field struct {
	name  string
	value json.RawMessage
}

// objectFields splits one JSON object into its fields, in order, refusing
// anything else, a repeated name, or data after the object. Its errors
// say what is wrong and where, quoting nothing from b. Each field's value
// is exactly one JSON value, a slice of b.
func objectFields(b []byte) ([]field, error) {
	if json.Valid(b) {
		if out, ok := validObjectFields(b); ok {
			return out, nil
		}
	}
	return decodeObjectFields(b)
}

// validObjectFields splits b, valid JSON, into its fields when it is an
// object whose names are all different; ok is false otherwise (the
// decoder then says what is wrong).
func validObjectFields(b []byte) (out []field, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	out = make([]field, 0, 2)
	for i < len(b) && b[i] != '}' {
		end := valueEnd(b, i) // the name, a string
		name := string(b[i+1 : end-1])
		if !plainASCII(b[i+1 : end-1]) {
			// Escapes, or bytes the decoder would read as something
			// else (invalid UTF-8): decoded as the decoder would.
			if json.Unmarshal(b[i:end], &name) != nil {
				return nil, false
			}
		}
		for _, f := range out {
			if f.name == name {
				return nil, false
			}
		}
		i = skipSpace(b, skipSpace(b, end)+1) // past the colon
		end = valueEnd(b, i)
		out = append(out, field{name, json.RawMessage(b[i:end])})
		if i = skipSpace(b, end); i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return out, true
}

// plainASCII reports whether s holds only ASCII bytes and no backslash.
func plainASCII(s []byte) bool {
	for _, c := range s {
		if c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}

// skipSpace returns the index of the first byte at or after i in b that
// is not JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the JSON value that begins at
// b[i]; b is valid JSON.
func valueEnd(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// decodeObjectFields is objectFields with the decoder, which finds and
// places every error.
func decodeObjectFields(b []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxAt(dec, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("got %s", kindOf(tok))
	}
	var out []field
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxAt(dec, err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("field %d has a key that is not a string", len(out)+1)
		}
		if seen[name] {
			return nil, fmt.Errorf("field %d repeats a name", len(out)+1)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, syntaxAt(dec, err)
		}
		out = append(out, field{name, v})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntaxAt(dec, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the object")
	}
	return out, nil
}

// syntaxAt describes a decoding error by its position alone: the
// decoder's own message may quote a piece of the input.
func syntaxAt(dec *json.Decoder, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("unexpected end of JSON")
	}
	return fmt.Errorf("invalid JSON at byte %d", dec.InputOffset())
}

// kindOf names the kind of a JSON token.
func kindOf(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "an array"
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

func invalid(format string, args ...any) error {
	return events.Errorf(events.CodeInvalidArgs, "exec: "+format, args...)
}
