package command

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Result is an exec call's result. Its JSON form is
//
//	{"exit_code": 0, "signal": "SIGKILL", "timed_out": false,
//	 "duration_ms": 12, "stdout": "...", "stderr": "...",
//	 "stdout_truncated": false, "stderr_truncated": false}
//
// signal is present only when a signal ended the process (exit_code is
// then -1). stdout (stderr) is present when the kept output is valid
// UTF-8; otherwise stdout_base64 (stderr_base64) holds it, standard
// base64 with padding, and stdout (stderr) is absent.
type Result struct {
	ExitCode        int
	Signal          string
	TimedOut        bool
	DurationMS      int64
	Stdout          []byte
	Stderr          []byte
	StdoutTruncated bool
	StderrTruncated bool
}

type wireResult struct {
	ExitCode        int     `json:"exit_code"`
	Signal          string  `json:"signal,omitempty"`
	TimedOut        bool    `json:"timed_out"`
	DurationMS      int64   `json:"duration_ms"`
	Stdout          *string `json:"stdout,omitempty"`
	StdoutBase64    *string `json:"stdout_base64,omitempty"`
	Stderr          *string `json:"stderr,omitempty"`
	StderrBase64    *string `json:"stderr_base64,omitempty"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
}

// MarshalJSON encodes the documented shape, compact and without HTML
// escaping.
func (r Result) MarshalJSON() ([]byte, error) {
	w := wireResult{
		ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, DurationMS: r.DurationMS,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
	}
	w.Stdout, w.StdoutBase64 = textOrBase64(r.Stdout)
	w.Stderr, w.StderrBase64 = textOrBase64(r.Stderr)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON decodes the documented shape.
func (r *Result) UnmarshalJSON(b []byte) error {
	var w wireResult
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	out, err := fromWire(w.Stdout, w.StdoutBase64)
	if err != nil {
		return fmt.Errorf("stdout: %w", err)
	}
	errOut, err := fromWire(w.Stderr, w.StderrBase64)
	if err != nil {
		return fmt.Errorf("stderr: %w", err)
	}
	*r = Result{
		ExitCode: w.ExitCode, Signal: w.Signal, TimedOut: w.TimedOut, DurationMS: w.DurationMS,
		Stdout: out, Stderr: errOut, StdoutTruncated: w.StdoutTruncated, StderrTruncated: w.StderrTruncated,
	}
	return nil
}

func textOrBase64(b []byte) (text, b64 *string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

func fromWire(text, b64 *string) ([]byte, error) {
	switch {
	case text != nil && b64 != nil:
		return nil, fmt.Errorf("both text and base64")
	case b64 != nil:
		return base64.StdEncoding.DecodeString(*b64)
	case text != nil:
		return []byte(*text), nil
	}
	return nil, nil
}

// trimRune cuts b back to a rune boundary when cutting at len(b) split a
// UTF-8 sequence, so truncated text stays text.
func trimRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if tail := b[len(b)-i:]; utf8.RuneStart(tail[0]) {
			if !utf8.FullRune(tail) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// encode marshals r, cutting stdout and stderr (and marking them
// truncated) so that the encoding fits in limit bytes. The two streams
// share what the rest leaves: each gets half, and what one does not need
// goes to the other.
func (r Result) encode(limit int) ([]byte, error) {
	b, err := r.MarshalJSON()
	if err != nil || len(b) <= limit {
		return b, err
	}
	bare := r
	bare.Stdout, bare.Stderr = nil, nil
	base, err := bare.MarshalJSON()
	if err != nil {
		return nil, err
	}
	budget := max(limit-len(base), 0)
	outCost, errCost := contentCost(r.Stdout), contentCost(r.Stderr)
	outMax, errMax := budget/2, budget-budget/2
	switch {
	case outCost <= outMax:
		errMax = budget - outCost
	case errCost <= errMax:
		outMax = budget - errCost
	}
	if outCost > outMax {
		r.Stdout, r.StdoutTruncated = prefixWithin(r.Stdout, outMax), true
	}
	if errCost > errMax {
		r.Stderr, r.StderrTruncated = prefixWithin(r.Stderr, errMax), true
	}
	// The costs are exact or over; this loop is the safety net.
	for {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		if len(b) <= limit {
			return b, nil
		}
		if len(r.Stdout) == 0 && len(r.Stderr) == 0 {
			return nil, fmt.Errorf("exec: result of %d bytes above %d with no output", len(b), limit)
		}
		over := len(b) - limit
		if len(r.Stdout) >= len(r.Stderr) {
			r.Stdout, r.StdoutTruncated = prefixWithin(r.Stdout, contentCost(r.Stdout)-over), true
		} else {
			r.Stderr, r.StderrTruncated = prefixWithin(r.Stderr, contentCost(r.Stderr)-over), true
		}
	}
}

// b64KeyExtra is what "stdout_base64" costs over "stdout".
const b64KeyExtra = len("_base64")

// contentCost is what b costs in the encoded result beyond an empty
// string: its escaped text, or its base64 and the longer key.
func contentCost(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	if !utf8.Valid(b) {
		return base64.StdEncoding.EncodedLen(len(b)) + b64KeyExtra
	}
	n := 0
	for _, c := range string(b) {
		n += runeCost(c)
	}
	return n
}

// runeCost is what encoding/json spends on c in a string, or more.
func runeCost(c rune) int {
	switch {
	case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
		return 2
	case c < 0x20 || c == '\u2028' || c == '\u2029':
		return 6
	}
	return utf8.RuneLen(c)
}

// prefixWithin returns the longest prefix of b, cut on a rune boundary,
// whose contentCost is at most budget (or close below it, for binary
// output whose prefix turns out to be text).
func prefixWithin(b []byte, budget int) []byte {
	if budget <= 0 || len(b) == 0 {
		return b[:0]
	}
	if !utf8.Valid(b) {
		n := max(budget-b64KeyExtra, 0) / 4 * 3
		p := b[:min(n, len(b)-1)]
		if !utf8.Valid(p) {
			return p
		}
		b = p // text after all: cost it as text
	}
	n := 0
	for i, c := range string(b) {
		n += runeCost(c)
		if n > budget {
			return b[:i]
		}
	}
	return b
}
