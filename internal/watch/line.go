package watch

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Line is e as one line of text, without a newline: its time
// (TimeLayout), workspace, op id, tool and kind, each a single token ("-"
// when e has none) padded to line up, then its details as key=value pairs
// in a fixed order, a value quoted (Go syntax) when it has spaces, quotes
// or '=' in it. The first five columns never hold white space, so
// `awk '{print $5}'` is the kind whatever the names.
func Line(e Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-12s %-35s %-12s %-13s", e.Time.UTC().Format(TimeLayout), dash(e.Workspace), dash(e.OpID), dash(e.Tool), e.Kind)
	for _, kv := range Details(e) {
		b.WriteByte(' ')
		b.WriteString(kv)
	}
	return strings.TrimRight(b.String(), " ")
}

// Details are e's details as key=value pairs, in the order Line writes
// them: the short identifying ones first, free text last. The caller owns
// the slice.
func Details(e Event) []string {
	var out []string
	add := func(k, v string) {
		if v != "" {
			out = append(out, k+"="+quote(v))
		}
	}
	add("code", string(e.Code))
	add("hold", e.HoldID)
	add("agent", e.Agent)
	add("approver", e.Approver)
	add("actor", e.Actor)
	add("mode", e.Mode)
	add("rule", e.Rule)
	add("attempt", e.Attempt)
	add("recovers", e.Recovers)
	if e.DurationMS != nil {
		add("duration", (time.Duration(*e.DurationMS) * time.Millisecond).String())
	}
	if e.ResultBytes != nil {
		add("result_bytes", strconv.Itoa(*e.ResultBytes))
	}
	if e.Recovered {
		add("recovered", "true")
	}
	if e.ExpiresAt != nil {
		add("expires", e.ExpiresAt.UTC().Format(TimeLayout))
	}
	add("request", e.RequestSubject)
	if e.Size != nil {
		add("size", strconv.Itoa(*e.Size))
	}
	add("hash", e.Hash)
	add("previous", e.PreviousHash)
	add("source", e.Source)
	if e.Warnings > 0 {
		add("warnings", strconv.Itoa(e.Warnings))
	}
	add("reason", e.Reason)
	add("message", e.Message)
	if e.Kind == Undecodable {
		add("subject", e.Subject)
	}
	add("error", e.Error)
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// quote quotes v when it would not read back as one token.
func quote(v string) string {
	for _, r := range v {
		if r <= ' ' || r == '"' || r == '=' || r == '\\' || r >= 0x7f {
			return strconv.Quote(v)
		}
	}
	return v
}
