package app_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/livefeed"
	"github.com/airlock-dev/airlock/internal/metrics"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An Airlock nobody watches does not republish. An auditor that
// subscribes and asks (as airlock watch does) gets the feed on at once and
// sees every op event stored from then on; the metrics say so.
func TestLiveFeedRunsWhileAnAuditorWatches(t *testing.T) {
	a := apptest.StartApp(t, app.Config{Auth: true, MetricsListen: "127.0.0.1:0"})
	assert.Equal(t, livefeed.Auto, a.Live.Mode())
	on, err := streams.Live(ctxT(t), a.JetStream)
	require.NoError(t, err)
	assert.False(t, on, "nobody watches")

	c := agentClient(t, a)
	before, err := c.Submit(ctxT(t), events.Request{Workspace: "team", Agent: "agent", Tool: "echo", Args: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	// None of Airlock's own subscriptions, nor the agent's, counts.
	st, err := a.Live.Sync(ctxT(t))
	require.NoError(t, err)
	assert.False(t, st.Live)
	assert.Zero(t, a.Live.Subscribers())

	auditor := connectAs(t, a, "auditor")
	sub, err := auditor.SubscribeSync(events.LivePrefix + "op.team.>")
	require.NoError(t, err)
	require.NoError(t, auditor.Flush())
	st, err = producers.EnsureLive(ctxT(t), auditor)
	require.NoError(t, err)
	assert.Equal(t, events.LiveStatus{Live: true, Mode: "auto"}, st)

	out, err := c.Submit(ctxT(t), events.Request{Workspace: "team", Agent: "agent", Tool: "echo", Args: json.RawMessage(`{"n":2}`)})
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, out.State)
	var seen []string
	for len(seen) < 2 {
		m, err := sub.NextMsg(5 * time.Second)
		require.NoError(t, err, "seen %v", seen)
		assert.Contains(t, m.Subject, out.OpID, "only the op submitted after the answer: %s", before.OpID)
		seen = append(seen, m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	}
	// Started by the gate's own process: no decided event (ADR 0025).
	assert.Equal(t, []string{"started", "completed"}, seen)

	got := scrape(t, a.MetricsAddr())
	assert.Equal(t, 1.0, got[metrics.LiveFeedOn])
	assert.Equal(t, 1.0, got[metrics.LiveFeedSubs])
	assert.Equal(t, 1.0, got[metrics.LiveFeedChanges], "turned on once")
}

// With the feed forced on, Airlock republishes with nobody watching, as
// an external NATS has it.
func TestLiveFeedOn(t *testing.T) {
	a := apptest.StartApp(t, app.Config{LiveFeed: livefeed.On})
	on, err := streams.Live(ctxT(t), a.JetStream)
	require.NoError(t, err)
	assert.True(t, on)
	assert.True(t, a.Live.On())
}
