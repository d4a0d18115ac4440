package events

import (
	"bytes"
	"errors"
	"math"
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
	p := canonParser{in: in, out: make([]byte, 0, len(in))}
	if err := p.value(0); err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.in) {
		return nil, errors.New("trailing data after JSON value")
	}
	return p.out, nil
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
	out.Write(appendCanonString(nil, s))
}

// canonNumber formats a JSON number literal as ECMAScript's
// Number.prototype.toString does, and refuses literals whose value a double
// cannot hold exactly enough to print back to the same number. Its errors
// do not quote the literal, which is part of the args.
func canonNumber(lit string) (string, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", errors.New("out of range")
	}
	s := formatES(f)
	if !sameValue(lit, s) {
		return "", errors.New("loses precision as a double; send it as a string")
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
