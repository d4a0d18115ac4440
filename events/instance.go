package events

import (
	"regexp"
	"unicode"
)

var instancePattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// ValidInstance reports whether s is an Airlock instance id: 16 lower-case
// hex digits, made once per data dir. Claims and ambiguous outcomes name
// the instance that held an attempt.
func ValidInstance(s string) bool { return instancePattern.MatchString(s) }

// MaxHostBytes bounds the host name a claim records.
const MaxHostBytes = 255

// CleanHost returns h as a claim may record it: at most MaxHostBytes,
// printable characters only ("?" for any other), "" for none.
func CleanHost(h string) string {
	if len(h) > MaxHostBytes {
		h = h[:MaxHostBytes]
	}
	out := []rune(h)
	for i, r := range out {
		if !unicode.IsPrint(r) || r == ' ' {
			out[i] = '?'
		}
	}
	return string(out)
}
