package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Limits of the tools' arguments; the input schemas say the same.
const (
	maxLineBytes = 4096
	maxDelayMS   = 600000
)

// lineArgs are the arguments of append.
type lineArgs struct {
	Line *string `json:"line"`
}

// slowArgs are the arguments of slow_append. DelayMS is a float64 so that
// a JSON integer written as 5.0 or 5e2 is accepted, as JSON Schema's
// "integer" accepts it; check rejects a fractional part.
type slowArgs struct {
	Line    *string  `json:"line"`
	DelayMS *float64 `json:"delay_ms"`
}

// noArgs are the arguments of the tools that take none.
type noArgs struct{}

// decodeArgs decodes the arguments raw of a tools/call into v, a pointer
// to a struct whose JSON field names are names. Only the arguments the
// schema lists are allowed, spelled exactly (encoding/json would match
// "LINE" to "line") and once each (it would keep the last of two). An
// absent arguments object counts as {}.
func decodeArgs(raw json.RawMessage, v any, names ...string) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	if err := checkKeys(raw, names); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeDecodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the arguments are followed by more data")
	}
	return nil
}

// checkKeys checks that raw is a JSON object whose keys are among names,
// each at most once.
func checkKeys(raw json.RawMessage, names []string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("the arguments must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("reading the arguments: %w", err)
		}
		key, _ := tok.(string) // object keys are always strings
		switch {
		case !slices.Contains(names, key):
			return fmt.Errorf("unknown argument %q (allowed: %s)", key, allowed(names))
		case seen[key]:
			return fmt.Errorf("argument %q is given twice", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("reading argument %q: %w", key, err)
		}
	}
	return nil
}

// allowed lists names for an error message.
func allowed(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return `"` + strings.Join(names, `", "`) + `"`
}

// describeDecodeError rewords an error of encoding/json for the caller.
func describeDecodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field == "" {
			return errors.New("the arguments must be a JSON object")
		}
		return fmt.Errorf("argument %q must be %s, not %s", typeErr.Field, jsonKind(typeErr), typeErr.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown argument %s", name)
	}
	return fmt.Errorf("invalid arguments: %w", err)
}

// jsonKind names the JSON type that the Go type of a type error wants.
func jsonKind(e *json.UnmarshalTypeError) string {
	switch e.Type.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Float64:
		return "a number"
	default:
		return "of type " + e.Type.String()
	}
}

// checkLine checks a line argument: present, 1 to maxLineBytes bytes, and
// without a newline, so it stays one line in --out and in --calls.
func checkLine(line *string) (string, error) {
	switch {
	case line == nil:
		return "", errors.New(`argument "line" (a string) is required`)
	case *line == "":
		return "", errors.New(`argument "line" must not be empty`)
	case len(*line) > maxLineBytes:
		return "", fmt.Errorf(`argument "line" is %d bytes long; at most %d are allowed`, len(*line), maxLineBytes)
	case strings.Contains(*line, "\n"):
		return "", errors.New(`argument "line" must not contain a newline`)
	}
	return *line, nil
}

// checkDelay checks a delay_ms argument: present, an integer, and from 0
// to maxDelayMS.
func checkDelay(ms *float64) (int64, error) {
	switch {
	case ms == nil:
		return 0, errors.New(`argument "delay_ms" (an integer) is required`)
	case *ms != math.Trunc(*ms):
		return 0, fmt.Errorf(`argument "delay_ms" must be an integer, not %s`, formatNumber(*ms))
	case *ms < 0 || *ms > maxDelayMS:
		return 0, fmt.Errorf(`argument "delay_ms" must be from 0 to %d, not %s`, maxDelayMS, formatNumber(*ms))
	}
	return int64(*ms), nil
}

// formatNumber formats a JSON number without an exponent.
func formatNumber(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// check validates the arguments of append and returns the line.
func (a lineArgs) check() (string, error) {
	return checkLine(a.Line)
}

// check validates the arguments of slow_append and returns the line and
// the delay in milliseconds.
func (a slowArgs) check() (string, int64, error) {
	line, err := checkLine(a.Line)
	if err != nil {
		return "", 0, err
	}
	ms, err := checkDelay(a.DelayMS)
	if err != nil {
		return "", 0, err
	}
	return line, ms, nil
}
