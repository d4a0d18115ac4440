package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxJSONDepth is the deepest nesting of arrays and objects that Canonical
// accepts.
const MaxJSONDepth = 64

// Canonical returns the canonical form of the JSON document in, following
// RFC 8785 (JSON Canonicalization Scheme): object members sorted by their
// UTF-16 code units, no insignificant white space, strings with the minimal
// escapes, numbers in ECMAScript form.
//
// It is stricter than RFC 8785 in three ways, each an error: invalid UTF-8,
// duplicate object keys, and numbers whose value changes when represented
// as an IEEE 754 double (send such values as strings). The last keeps two
// different arguments from sharing a fingerprint.
func Canonical(in []byte) ([]byte, error) {
	if !utf8.Valid(in) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var out bytes.Buffer
	out.Grow(len(in))
	if err := canonValue(dec, &out, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return out.Bytes(), nil
}

func canonValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return errors.New("unexpected end of JSON")
		}
		return err
	}
	return canonToken(dec, tok, out, depth)
}

func canonToken(dec *json.Decoder, tok json.Token, out *bytes.Buffer, depth int) error {
	switch v := tok.(type) {
	case json.Delim:
		if depth >= MaxJSONDepth {
			return fmt.Errorf("nesting deeper than %d", MaxJSONDepth)
		}
		if v == '[' {
			return canonArray(dec, out, depth+1)
		}
		return canonObject(dec, out, depth+1)
	case string:
		writeCanonString(out, v)
	case json.Number:
		s, err := canonNumber(string(v))
		if err != nil {
			return err
		}
		out.WriteString(s)
	case bool:
		if v {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	}
	return nil
}

func canonArray(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	out.WriteByte('[')
	for i := 0; ; i++ {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok && d == ']' {
			out.WriteByte(']')
			return nil
		}
		if i > 0 {
			out.WriteByte(',')
		}
		if err := canonToken(dec, tok, out, depth); err != nil {
			return err
		}
	}
}

type member struct {
	key   string
	value []byte
}

func canonObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	var members []member
	seen := make(map[string]struct{})
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok && d == '}' {
			break
		}
		key := tok.(string) // the decoder only yields strings in key position
		if _, dup := seen[key]; dup {
			return fmt.Errorf("duplicate object key %q", key)
		}
		seen[key] = struct{}{}
		var val bytes.Buffer
		if err := canonValue(dec, &val, depth); err != nil {
			return err
		}
		members = append(members, member{key: key, value: val.Bytes()})
	}
	sort.Slice(members, func(i, j int) bool { return lessUTF16(members[i].key, members[j].key) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		writeCanonString(out, m.key)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return nil
}

// lessUTF16 orders strings by their UTF-16 code units, as RFC 8785 requires.
func lessUTF16(a, b string) bool {
	if isASCII(a) && isASCII(b) {
		return a < b
	}
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

func writeCanonString(out *bytes.Buffer, s string) {
	out.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\f':
			out.WriteString(`\f`)
		case '\n':
			out.WriteString(`\n`)
		case '\r':
			out.WriteString(`\r`)
		case '\t':
			out.WriteString(`\t`)
		default:
			if c < 0x20 {
				out.WriteString(`\u00`)
				out.WriteByte(hexDigits[c>>4])
				out.WriteByte(hexDigits[c&0xf])
			} else {
				out.WriteByte(c)
			}
		}
	}
	out.WriteByte('"')
}

// canonNumber formats a JSON number literal as ECMAScript's
// Number.prototype.toString does, and refuses literals whose value a double
// cannot hold exactly enough to print back to the same number.
func canonNumber(lit string) (string, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("number %s out of range", lit)
	}
	s := formatES(f)
	if !sameValue(lit, s) {
		return "", fmt.Errorf("number %s loses precision as a double (%s); send it as a string", lit, s)
	}
	return s, nil
}

func sameValue(lit, canon string) bool {
	if lit == canon {
		return true
	}
	// Short integers and short decimals are exact in a double.
	if len(lit) <= 15 && !strings.ContainsAny(lit, "eE") {
		return true
	}
	a, ok1 := new(big.Rat).SetString(lit)
	b, ok2 := new(big.Rat).SetString(canon)
	return ok1 && ok2 && a.Cmp(b) == 0
}

// formatES implements the ECMAScript Number::toString algorithm for finite
// doubles.
func formatES(f float64) string {
	if f == 0 {
		return "0"
	}
	var sb strings.Builder
	if f < 0 {
		sb.WriteByte('-')
		f = -f
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expStr)
	k, n := len(digits), exp+1
	switch {
	case k <= n && n <= 21:
		sb.WriteString(digits)
		sb.WriteString(strings.Repeat("0", n-k))
	case 0 < n && n <= 21:
		sb.WriteString(digits[:n])
		sb.WriteByte('.')
		sb.WriteString(digits[n:])
	case -6 < n && n <= 0:
		sb.WriteString("0.")
		sb.WriteString(strings.Repeat("0", -n))
		sb.WriteString(digits)
	default:
		sb.WriteByte(digits[0])
		if k > 1 {
			sb.WriteByte('.')
			sb.WriteString(digits[1:])
		}
		sb.WriteByte('e')
		if n-1 >= 0 {
			sb.WriteByte('+')
		}
		sb.WriteString(strconv.Itoa(n - 1))
	}
	return sb.String()
}
