package events

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// The records on the pipeline's hot path (the op record the projection
// keeps for every event, and the decided, started and completed events)
// are written and read here without reflection. The output is byte for
// byte what encoding/json writes with HTML escaping off (MarshalJSON),
// and a read gives what json.Unmarshal gives; a reader that meets
// anything it does not take (an escape in a string, an unknown or
// repeated key, a null, a number with a fraction) says so and the caller
// falls back to encoding/json, so odd input is read exactly as before.
// jsonfast_test.go holds both to encoding/json on random values of every
// field and on fuzzed input.

// jwriter appends one JSON object's fields.
type jwriter struct {
	b []byte
	n int // fields written
}

func (w *jwriter) key(k string) {
	if w.n > 0 {
		w.b = append(w.b, ',')
	} else {
		w.b = append(w.b, '{')
	}
	w.n++
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

// end closes the object.
func (w *jwriter) end() {
	if w.n == 0 {
		w.b = append(w.b, '{')
	}
	w.b = append(w.b, '}')
}

func (w *jwriter) str(k, v string) {
	w.key(k)
	w.b = appendJSONString(w.b, v)
}

func (w *jwriter) strOmit(k, v string) {
	if v != "" {
		w.str(k, v)
	}
}

func (w *jwriter) uint(k string, v uint64) {
	w.key(k)
	w.b = strconv.AppendUint(w.b, v, 10)
}

func (w *jwriter) uintOmit(k string, v uint64) {
	if v != 0 {
		w.uint(k, v)
	}
}

func (w *jwriter) int(k string, v int64) {
	w.key(k)
	w.b = strconv.AppendInt(w.b, v, 10)
}

func (w *jwriter) intOmit(k string, v int64) {
	if v != 0 {
		w.int(k, v)
	}
}

func (w *jwriter) boolOmit(k string, v bool) {
	if v {
		w.key(k)
		w.b = append(w.b, "true"...)
	}
}

// time writes t as time.Time.MarshalJSON does; false for a time it
// refuses (a year outside 0-9999), which encoding/json refuses too.
func (w *jwriter) time(k string, t time.Time) bool {
	w.key(k)
	w.b = append(w.b, '"')
	var err error
	if w.b, err = t.AppendText(w.b); err != nil {
		return false
	}
	w.b = append(w.b, '"')
	return true
}

func (w *jwriter) timeOmit(k string, t *time.Time) bool {
	return t == nil || w.time(k, *t)
}

// strings writes a map of strings with its keys sorted, as encoding/json
// does; nothing for an empty map (every such field is omitempty).
func (w *jwriter) strings(k string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	w.key(k)
	var stack [8]string
	keys := stack[:0]
	for key := range m {
		keys = append(keys, key)
	}
	sortStrings(keys)
	w.b = append(w.b, '{')
	for i, key := range keys {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.b = appendJSONString(w.b, key)
		w.b = append(w.b, ':')
		w.b = appendJSONString(w.b, m[key])
	}
	w.b = append(w.b, '}')
}

// raw writes a json.RawMessage field (omitempty) compacted, as
// encoding/json does; false when it is not valid JSON.
func (w *jwriter) raw(k string, v json.RawMessage) bool {
	if len(v) == 0 {
		return true
	}
	w.key(k)
	buf := bytes.NewBuffer(w.b)
	if err := json.Compact(buf, v); err != nil {
		return false
	}
	w.b = buf.Bytes()
	return true
}

// sortStrings is an insertion sort: the maps written here hold a few
// keys.
func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// appendJSONString appends s quoted as encoding/json writes a string with
// HTML escaping off: ", \ and control characters escaped, invalid UTF-8
// as \ufffd, U+2028 and U+2029 as \u2028 and \u2029.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = appendEscapedASCII(append(b, s[start:i]...), c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendEscapedASCII appends the JSON escape of an ASCII byte a string
// may not hold as it is: ", \ or a control character (the short form
// where JSON has one).
func appendEscapedASCII(b []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}

// jreader reads the JSON the writers above write. Each method leaves the
// reader after what it read and returns false for anything it does not
// take, and the caller then falls back to encoding/json.
type jreader struct {
	b []byte
	i int
}

func (r *jreader) ws() { r.i = skipJSONSpace(r.b, r.i) }

// skipJSONSpace returns the index of the first byte of b from i on that
// is not JSON white space.
func skipJSONSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (r *jreader) next(c byte) bool {
	r.ws()
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

// done reports whether only white space is left.
func (r *jreader) done() bool {
	r.ws()
	return r.i == len(r.b)
}

// object reads an object, calling field with the reader at each key's
// value. A key may appear once: fields are numbered by field's return
// (1-63; 0 for a key it does not take) and a second one is not taken, as
// encoding/json would merge the two values.
func (r *jreader) object(field func(key []byte) int) bool {
	var seen uint64
	return r.members(func(key []byte) bool {
		n := field(key)
		if n <= 0 || seen&(1<<n) != 0 {
			return false
		}
		seen |= 1 << n
		return true
	})
}

// members reads an object, calling member with the reader at each key's
// value; member reads the value and returns whether it took it.
func (r *jreader) members(member func(key []byte) bool) bool {
	if !r.next('{') {
		return false
	}
	if r.next('}') {
		return true
	}
	for {
		r.ws()
		key, ok := r.plain()
		if !ok || !r.next(':') {
			return false
		}
		r.ws()
		if !member(key) {
			return false
		}
		if r.next(',') {
			continue
		}
		return r.next('}')
	}
}

// plain reads a string without escapes or control characters, in valid
// UTF-8 (what json.Unmarshal takes as it is), returning its bytes.
func (r *jreader) plain() ([]byte, bool) {
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		return nil, false
	}
	start, ascii := r.i+1, true
	for j := start; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			s := r.b[start:j]
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			r.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (r *jreader) str(dst *string) bool { return readString(r, dst) }

// readString reads a string into any string type (State, Code).
func readString[T ~string](r *jreader, dst *T) bool {
	s, ok := r.plain()
	if ok {
		*dst = T(s)
	}
	return ok
}

// digits reads an integer without fraction or exponent that fits a
// uint64, and whether it had a minus sign.
func (r *jreader) digits() (v uint64, minus, ok bool) {
	j := r.i
	if j < len(r.b) && r.b[j] == '-' {
		minus = true
		j++
	}
	first := j
	for ; j < len(r.b) && r.b[j] >= '0' && r.b[j] <= '9'; j++ {
		d := uint64(r.b[j] - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false, false
		}
		v = v*10 + d
	}
	if n := j - first; n == 0 || (n > 1 && r.b[first] == '0') {
		return 0, false, false
	}
	if j < len(r.b) {
		switch r.b[j] {
		case '.', 'e', 'E':
			return 0, false, false
		}
	}
	r.i = j
	return v, minus, true
}

func (r *jreader) uint(dst *uint64) bool {
	start := r.i
	v, minus, ok := r.digits()
	if !ok || minus {
		r.i = start
		return false
	}
	*dst = v
	return true
}

func (r *jreader) int64(dst *int64) bool {
	start := r.i
	v, minus, ok := r.digits()
	switch {
	case ok && !minus && v <= math.MaxInt64:
		*dst = int64(v)
	case ok && minus && v <= 1<<63:
		*dst = int64(-v) // -(1<<63) wraps to math.MinInt64
	default:
		r.i = start
		return false
	}
	return true
}

func (r *jreader) int(dst *int) bool {
	var v int64
	if !r.int64(&v) || int64(int(v)) != v {
		return false
	}
	*dst = int(v)
	return true
}

func (r *jreader) bool(dst *bool) bool {
	switch {
	case bytes.HasPrefix(r.b[r.i:], []byte("true")):
		*dst = true
		r.i += 4
	case bytes.HasPrefix(r.b[r.i:], []byte("false")):
		*dst = false
		r.i += 5
	default:
		return false
	}
	return true
}

// time reads a string as time.Time.UnmarshalJSON does.
func (r *jreader) time(dst *time.Time) bool {
	start := r.i
	if _, ok := r.plain(); !ok {
		return false
	}
	return dst.UnmarshalJSON(r.b[start:r.i]) == nil
}

func (r *jreader) timePtr(dst **time.Time) bool {
	t := new(time.Time)
	if !r.time(t) {
		return false
	}
	*dst = t
	return true
}

// strings reads an object of strings into a new map (a repeated key
// keeps its last value, as in encoding/json).
func (r *jreader) strings(dst *map[string]string) bool {
	m := make(map[string]string)
	if !r.members(func(k []byte) bool {
		v, ok := r.plain()
		if ok {
			m[string(k)] = string(v)
		}
		return ok
	}) {
		return false
	}
	*dst = m
	return true
}

// bytes reads a []byte as encoding/json does: standard base64 in a
// string.
func (r *jreader) bytes(dst *[]byte) bool {
	s, ok := r.plain()
	if !ok {
		return false
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(b, s)
	if err != nil {
		return false
	}
	*dst = b[:n]
	return true
}

// raw reads an object or array as json.RawMessage takes it: its bytes
// as they are, once checked to be valid JSON.
func (r *jreader) raw(dst *json.RawMessage) bool {
	if r.i >= len(r.b) || (r.b[r.i] != '{' && r.b[r.i] != '[') {
		return false
	}
	start, depth, in := r.i, 0, false
	for j := start; j < len(r.b); j++ {
		c := r.b[j]
		switch {
		case in:
			switch c {
			case '\\':
				j++
			case '"':
				in = false
			}
		case c == '"':
			in = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				v := r.b[start : j+1]
				if !json.Valid(v) {
					return false
				}
				*dst = append(json.RawMessage(nil), v...)
				r.i = j + 1
				return true
			}
		}
	}
	return false
}
