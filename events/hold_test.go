package events_test

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	testHold   = "hold_0123456789abcdef0123456789abcdef"
	testDigest = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

func TestHoldID(t *testing.T) {
	op := "op_0123456789abcdef0123456789abcdef"
	assert.Equal(t, testHold, events.HoldID(op))
	got, ok := events.OpOfHold(testHold)
	require.True(t, ok)
	assert.Equal(t, op, got)
	for _, bad := range []string{"", "hold_", "hold_0123", "op_0123456789abcdef0123456789abcdef", "hold_0123456789ABCDEF0123456789abcdef", testHold + "0"} {
		_, ok := events.OpOfHold(bad)
		assert.False(t, ok, bad)
	}
}

func TestParseResolution(t *testing.T) {
	ok := `{"hold_id":"` + testHold + `","args_digest":"` + testDigest + `","decision":"grant","reason":"fine"}`
	r, err := events.ParseResolution([]byte(ok))
	require.NoError(t, err)
	assert.Equal(t, events.DecisionGrant, r.Decision)
	bad := map[string]string{
		"not JSON":         `{`,
		"two objects":      ok + ok,
		"unknown field":    strings.Replace(ok, `"reason"`, `"approver":"ceo","reason"`, 1),
		"bad hold":         strings.Replace(ok, testHold, "hold_1", 1),
		"bad digest":       strings.Replace(ok, testDigest, "sha256:XYZ", 1),
		"bad decision":     strings.Replace(ok, `"grant"`, `"approve"`, 1),
		"empty reason":     strings.Replace(ok, `"fine"`, `""`, 1),
		"long reason":      strings.Replace(ok, `"fine"`, `"`+strings.Repeat("r", events.MaxReasonBytes+1)+`"`, 1),
		"oversized body":   ok + strings.Repeat(" ", events.MaxCommandBytes),
		"array, no object": `[]`,
	}
	for name, body := range bad {
		_, err := events.ParseResolution([]byte(body))
		assert.Equal(t, events.CodeInvalidResolution, events.CodeOf(err), name)
	}
	_, err = events.ParseResolution([]byte(strings.Replace(ok, `"fine"`, `"`+strings.Repeat("r", events.MaxReasonBytes)+`"`, 1)))
	assert.NoError(t, err, "a reason at the limit")
}

func TestParseModeControl(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	valid := func(s string) bool { return s == "auto" || s == "confirm" || s == "locked" }
	c, err := events.ParseModeControl([]byte(`{"mode":"locked","reason":"incident","expires_at":"2026-01-02T04:00:00Z"}`), valid, now)
	require.NoError(t, err)
	assert.Equal(t, "locked", c.Mode)
	assert.Equal(t, "locked", (&events.ModeSet{Mode: c.Mode, ExpiresAt: c.ExpiresAt}).InForce(now))
	assert.Equal(t, "", (&events.ModeSet{Mode: c.Mode, ExpiresAt: c.ExpiresAt}).InForce(now.Add(time.Hour)), "expired")
	c, err = events.ParseModeControl([]byte(`{"mode":"","reason":"back to the policy"}`), valid, now)
	require.NoError(t, err)
	assert.Empty(t, c.Mode)
	for name, body := range map[string]string{
		"bad mode":       `{"mode":"paranoid","reason":"x"}`,
		"no reason":      `{"mode":"locked"}`,
		"past expiry":    `{"mode":"locked","reason":"x","expires_at":"2026-01-02T03:00:00Z"}`,
		"unknown field":  `{"mode":"locked","reason":"x","actor":"root"}`,
		"not an object":  `"locked"`,
		"trailing data":  `{"mode":"locked","reason":"x"} {}`,
		"oversized body": `{"mode":"locked","reason":"` + strings.Repeat("x", events.MaxCommandBytes) + `"}`,
	} {
		_, err := events.ParseModeControl([]byte(body), valid, now)
		assert.Equal(t, events.CodeInvalidControl, events.CodeOf(err), name)
	}
}

func TestReplySubjects(t *testing.T) {
	assert.True(t, events.ValidReplyTo("airlock.v1.reply.agent.abc.op_1", "agent"))
	for _, bad := range []string{"", "airlock.v1.reply.agent.", "airlock.v1.reply.other.abc", "_INBOX.abc", "airlock.v1.reply.agent.*", "airlock.v1.reply.agent.a b", "airlock.v1.reply.agent." + strings.Repeat("x", 256)} {
		assert.False(t, events.ValidReplyTo(bad, "agent"), bad)
	}
	for _, good := range []string{"_INBOX.abc.def", "_R_.xyz.1"} {
		assert.True(t, events.ValidResponse(good), good)
	}
	for _, bad := range []string{"", "_INBOX.", "airlock.v1.op.ws.op_1.echo.decided", "_INBOX.>", "_R_"} {
		assert.False(t, events.ValidResponse(bad), bad)
	}
	ws, agent, ok := events.RequestSubjectParts(events.RequestSubject("ws", "bot"))
	assert.True(t, ok)
	assert.Equal(t, []string{"ws", "bot"}, []string{ws, agent})
	for _, bad := range []string{"airlock.v1.req.ws", "airlock.v1.req.ws.bot.x", "airlock.v1.req.WS.bot", "airlock.v1.op.ws.bot"} {
		_, _, ok := events.RequestSubjectParts(bad)
		assert.False(t, ok, bad)
	}
}
