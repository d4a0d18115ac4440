package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/events"
)

// Message is the JSON body of a notification: Text for the chat tools'
// incoming webhooks (Slack, Mattermost, Rocket.Chat and others show the
// "text" field), Airlock for programs.
type Message struct {
	Text    string `json:"text"`
	Airlock Hold   `json:"airlock"`
}

// Hold is what a notification says of a hold: names, ids, digests and the
// policy's reason, as the held event carries them; never argument text.
type Hold struct {
	Workspace string `json:"workspace"`
	HoldID    string `json:"hold_id"`
	OpID      string `json:"op_id"`
	Agent     string `json:"agent"`
	Tool      string `json:"tool"`
	Class     string `json:"class"`
	// Reason is the policy's, at most MaxReasonBytes.
	Reason     string    `json:"reason"`
	ArgsDigest string    `json:"args_digest"`
	ExpiresAt  time.Time `json:"expires_at"`
	// Link is where an approver reviews the hold (after logging in);
	// absent when there is none.
	Link string `json:"link,omitempty"`
}

// message is the notification of held event h, with link ("" for none).
// h carries a request summary.
func message(h *events.Held, link string) Message {
	hold := Hold{
		Workspace: h.Workspace, HoldID: h.HoldID, OpID: h.OpID,
		Agent: h.Request.Agent, Tool: h.Request.Tool, Class: h.Request.Class,
		Reason: cut(h.Reason, MaxReasonBytes), ArgsDigest: h.ArgsDigest,
		ExpiresAt: h.ExpiresAt.UTC(), Link: link,
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Airlock: %s in %s: agent %s wants %s (%s)", hold.HoldID, hold.Workspace, hold.Agent, hold.Tool, hold.Class)
	if r := oneLine(hold.Reason); r != "" {
		b.WriteString(": ")
		b.WriteString(r)
	}
	if last, _ := utf8.DecodeLastRuneInString(b.String()); !strings.ContainsRune(".!?…", last) {
		b.WriteString(".")
	}
	if link != "" {
		b.WriteString(" Review: ")
		b.WriteString(link)
	}
	return Message{Text: b.String(), Airlock: hold}
}

// encode is m's JSON, without HTML escapes (a link's & stays &), at most
// MaxMessageBytes.
func (m Message) encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("encode notification: %w", err)
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(body) > MaxMessageBytes {
		return nil, fmt.Errorf("notification is %d bytes, limit %d", len(body), MaxMessageBytes)
	}
	return body, nil
}

// cut bounds s to n bytes, cutting at a rune boundary and ending with "…"
// when it cuts; invalid UTF-8 becomes U+FFFD.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	n -= len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// oneLine puts s on one line: each run of white space or control
// characters becomes one space.
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
}
