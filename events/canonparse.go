package events

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// canonParser reads one JSON document and writes its canonical form in a
// single pass. Input is known to be valid UTF-8.
type canonParser struct {
	in  []byte
	pos int
	out []byte
}

var errEOF = errors.New("unexpected end of JSON (EOF)")

func (p *canonParser) skipSpace() { p.pos = skipJSONSpace(p.in, p.pos) }

func (p *canonParser) syntax(what string) error {
	if p.pos >= len(p.in) {
		return errEOF
	}
	// Positions, never the input: args are refused with this message,
	// and a rejection stores it.
	return fmt.Errorf("invalid character %s at offset %d", what, p.pos)
}

func (p *canonParser) value(depth int) error {
	p.skipSpace()
	if p.pos >= len(p.in) {
		return errEOF
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		if depth >= MaxJSONDepth {
			return fmt.Errorf("nesting deeper than %d", MaxJSONDepth)
		}
		return p.object(depth + 1)
	case c == '[':
		if depth >= MaxJSONDepth {
			return fmt.Errorf("nesting deeper than %d", MaxJSONDepth)
		}
		return p.array(depth + 1)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return err
		}
		p.out = appendCanonString(p.out, s)
		return nil
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
				p.pos += len(lit)
				p.out = append(p.out, lit...)
				return nil
			}
		}
		return p.syntax("looking for beginning of value")
	}
}

func (p *canonParser) array(depth int) error {
	p.pos++ // [
	p.out = append(p.out, '[')
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		p.out = append(p.out, ']')
		return nil
	}
	for {
		if err := p.value(depth); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.in) {
			return errEOF
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			p.out = append(p.out, ',')
		case ']':
			p.pos++
			p.out = append(p.out, ']')
			return nil
		default:
			return p.syntax("after array element")
		}
	}
}

func (p *canonParser) object(depth int) error {
	p.pos++ // {
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		p.out = append(p.out, '{', '}')
		return nil
	}
	type kv struct {
		key        string
		at         int // the key's offset in the input
		start, end int // the value's canonical bytes in p.out
	}
	var members []kv
	base := len(p.out)
	for {
		p.skipSpace()
		if p.pos >= len(p.in) {
			return errEOF
		}
		if p.in[p.pos] != '"' {
			return p.syntax("looking for beginning of object key string")
		}
		at := p.pos
		key, err := p.str()
		if err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return p.syntax("after object key")
		}
		p.pos++
		start := len(p.out)
		if err := p.value(depth); err != nil {
			return err
		}
		members = append(members, kv{key, at, start, len(p.out)})
		p.skipSpace()
		if p.pos >= len(p.in) {
			return errEOF
		}
		if p.in[p.pos] == '}' {
			p.pos++
			break
		}
		if p.in[p.pos] != ',' {
			return p.syntax("after object key:value pair")
		}
		p.pos++
	}
	sorted := slices.IsSortedFunc(members, func(a, b kv) int { return cmpUTF16(a.key, b.key) })
	if !sorted {
		slices.SortStableFunc(members, func(a, b kv) int { return cmpUTF16(a.key, b.key) })
	}
	for i := 1; i < len(members); i++ {
		if members[i].key == members[i-1].key {
			return fmt.Errorf("duplicate object key at offset %d", max(members[i].at, members[i-1].at))
		}
	}
	values := slices.Clone(p.out[base:])
	p.out = append(p.out[:base], '{')
	for i, m := range members {
		if i > 0 {
			p.out = append(p.out, ',')
		}
		p.out = appendCanonString(p.out, m.key)
		p.out = append(p.out, ':')
		p.out = append(p.out, values[m.start-base:m.end-base]...)
	}
	p.out = append(p.out, '}')
	return nil
}

// str reads a string literal and returns its value.
func (p *canonParser) str() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		switch {
		case c == '"':
			s := string(p.in[start:p.pos])
			p.pos++
			return s, nil
		case c == '\\':
			return p.strEscaped(start)
		case c < 0x20:
			return "", p.syntax("in string literal")
		}
		p.pos++
	}
	return "", errEOF
}

// strEscaped finishes a string literal that holds escapes.
func (p *canonParser) strEscaped(start int) (string, error) {
	buf := append([]byte(nil), p.in[start:p.pos]...)
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return "", p.syntax("in string literal")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		if p.pos+1 >= len(p.in) {
			return "", errEOF
		}
		e := p.in[p.pos+1]
		p.pos += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := p.hexRune()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || p.pos+1 >= len(p.in) || p.in[p.pos] != '\\' || p.in[p.pos+1] != 'u' {
					return "", errors.New("string escape names a lone UTF-16 surrogate")
				}
				p.pos += 2
				r2, err := p.hexRune()
				if err != nil {
					return "", err
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", errors.New("string escape names a lone UTF-16 surrogate")
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			p.pos--
			return "", p.syntax("in string escape code")
		}
	}
	return "", errEOF
}

func (p *canonParser) hexRune() (rune, error) {
	if p.pos+4 > len(p.in) {
		return 0, errEOF
	}
	v, err := strconv.ParseUint(string(p.in[p.pos:p.pos+4]), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid \\u escape at offset %d", p.pos)
	}
	p.pos += 4
	return rune(v), nil
}

// number reads a number literal per the JSON grammar and writes its
// canonical form.
func (p *canonParser) number() error {
	start := p.pos
	if p.in[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.in) && '0' <= p.in[p.pos] && p.in[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	switch {
	case p.pos < len(p.in) && p.in[p.pos] == '0':
		p.pos++
	case digits() == 0:
		return p.syntax("in numeric literal")
	}
	if p.pos < len(p.in) && p.in[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return p.syntax("after decimal point in numeric literal")
		}
	}
	if p.pos < len(p.in) && (p.in[p.pos] == 'e' || p.in[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.in) && (p.in[p.pos] == '+' || p.in[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return p.syntax("in exponent of numeric literal")
		}
	}
	s, err := canonNumber(string(p.in[start:p.pos]))
	if err != nil {
		return fmt.Errorf("number at offset %d %w", start, err)
	}
	p.out = append(p.out, s...)
	return nil
}

// cmpUTF16 orders strings by their UTF-16 code units, as RFC 8785 requires.
func cmpUTF16(a, b string) int {
	if a == b {
		return 0
	}
	if lessUTF16(a, b) {
		return -1
	}
	return 1
}

// appendCanonString appends s as a canonical JSON string.
func appendCanonString(out []byte, s string) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			out = appendEscapedASCII(out, c)
		} else {
			out = append(out, c)
		}
	}
	return append(out, '"')
}
