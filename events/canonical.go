package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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
// different arguments from sharing a fingerprint. As RFC 8785 requires, a
// string escape naming a lone surrogate (\ud800) is an error too.
func Canonical(in []byte) ([]byte, error) {
	if !utf8.Valid(in) {
		return nil, errors.New("not valid UTF-8")
	}
	if loneSurrogate(in) {
		return nil, errors.New("string escape names a lone UTF-16 surrogate")
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
	// Compare the decimal values digit by digit: big.Rat would spend tens
	// of milliseconds on a literal like 1e-999999.
	an, ad, ae, ok1 := decimal(lit)
	bn, bd, be, ok2 := decimal(canon)
	return ok1 && ok2 && an == bn && ad == bd && ae == be
}

// decimal splits a JSON number literal into sign, significant digits
// (no leading or trailing zeros) and exponent: -1.50e3 is (true, "15", 2).
// Zero is (false, "", 0). ok is false for an exponent too large to use.
func decimal(lit string) (neg bool, digits string, exp int64, ok bool) {
	neg = strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, expStr, hasExp := strings.Cut(strings.ToLower(lit), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits = strings.TrimLeft(intPart+frac, "0")
	trimmed := strings.TrimRight(digits, "0")
	if trimmed == "" {
		return false, "", 0, true
	}
	if hasExp {
		var err error
		if exp, err = strconv.ParseInt(expStr, 10, 64); err != nil || exp > 1<<40 || exp < -1<<40 {
			return false, "", 0, false
		}
	}
	exp += int64(len(digits)-len(trimmed)) - int64(len(frac))
	return neg, trimmed, exp, true
}

// loneSurrogate reports whether a string in the JSON text in has a \u
// escape naming a surrogate that is not half of a high-low pair. The
// decoder would silently turn it into U+FFFD.
func loneSurrogate(in []byte) bool {
	inString := false
	for i := 0; i < len(in); i++ {
		switch c := in[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(in) && in[i+1] == 'u':
			r := hex4(in[i+2:])
			switch {
			case r < 0xd800 || r > 0xdfff:
				i += 5
			case r >= 0xdc00:
				return true
			case len(in) > i+7 && in[i+6] == '\\' && in[i+7] == 'u' && hex4(in[i+8:])>>10 == 0xdc00>>10:
				i += 11
			default:
				return true
			}
		case c == '\\':
			i++
		}
	}
	return false
}

// hex4 decodes four hex digits at the start of b, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		v := unhex(c)
		if v < 0 {
			return -1
		}
		r = r<<4 | rune(v)
	}
	return r
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
