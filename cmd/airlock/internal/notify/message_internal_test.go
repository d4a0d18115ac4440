package notify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func held(reason string) *events.Held {
	op := "op_" + strings.Repeat("ab", 16)
	return &events.Held{
		OpHeader: events.OpHeader{OpID: op, Workspace: "prod"},
		Request:  &events.Summary{Agent: "bot", Tool: "drop_database", Class: "destructive", ArgsDigest: "sha256:" + strings.Repeat("0", 64)},
		HoldID:   events.HoldID(op), ArgsDigest: "sha256:" + strings.Repeat("0", 64),
		ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)),
		Reason:    reason,
	}
}

func TestMessageText(t *testing.T) {
	for _, tc := range []struct {
		name, reason, link, want string
	}{
		{"reason and link", "dropping a database needs review", "https://a.example.com/h?x=1&y=2",
			"Airlock: hold_abababababababababababababababab in prod: agent bot wants drop_database (destructive): dropping a database needs review. Review: https://a.example.com/h?x=1&y=2"},
		{"reason ending a sentence", "Approve it!", "",
			"Airlock: hold_abababababababababababababababab in prod: agent bot wants drop_database (destructive): Approve it!"},
		{"reason on several lines", "first line.\n\tsecond\r\nline\x00.", "",
			"Airlock: hold_abababababababababababababababab in prod: agent bot wants drop_database (destructive): first line. second line ."},
		{"no reason", "", "https://a.example.com/h",
			"Airlock: hold_abababababababababababababababab in prod: agent bot wants drop_database (destructive). Review: https://a.example.com/h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := message(held(tc.reason), tc.link)
			assert.Equal(t, tc.want, m.Text)
			assert.Equal(t, tc.reason, m.Airlock.Reason, "the structured reason is the policy's")
			assert.Equal(t, time.UTC, m.Airlock.ExpiresAt.Location())
			body, err := m.encode()
			require.NoError(t, err)
			assert.NotContains(t, string(body), `\u0026`)
			var back Message
			require.NoError(t, json.Unmarshal(body, &back))
			assert.Equal(t, m, back)
		})
	}
}

// However long the reason, the message stays within MaxMessageBytes.
func TestMessageIsBounded(t *testing.T) {
	for _, reason := range []string{
		strings.Repeat("x", 100_000),
		strings.Repeat("é", 50_000),
		strings.Repeat("\x01", 50_000), // six bytes each in JSON
		strings.Repeat("<&>", 50_000),
		"\xff\xfe" + strings.Repeat("y", 2000),
	} {
		m := message(held(reason), "https://a.example.com/"+strings.Repeat("l", MaxLinkBytes-23))
		assert.LessOrEqual(t, len(m.Airlock.Reason), MaxReasonBytes)
		assert.True(t, utf8.ValidString(m.Airlock.Reason))
		assert.True(t, strings.HasSuffix(m.Airlock.Reason, "…"))
		body, err := m.encode()
		require.NoError(t, err)
		assert.LessOrEqual(t, len(body), MaxMessageBytes)
	}
}
