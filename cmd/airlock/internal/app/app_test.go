package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEchoRunsEndToEnd(t *testing.T) {
	a := apptest.StartApp(t, app.Config{})
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := c.Submit(ctx, events.Request{Workspace: "ws1", Agent: "a1", Tool: "echo", Args: json.RawMessage(`{"b": 2, "a": [1, "x"]}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State)
	assert.JSONEq(t, `{"a":[1,"x"],"b":2}`, string(out.Result))
	// decided, started, completed: the projector folds all three (after
	// the policy.loaded event; the reply may come first).
	var op *events.Op
	require.Eventually(t, func() bool {
		op, err = c.Op(ctx, out.OpID)
		return err == nil && op.State == events.StateCompleted
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, op.Attempts)
	assert.Equal(t, "echo", op.Tool)
	assert.Equal(t, "read", op.Class)
	assert.Equal(t, events.ArgsDigest([]byte(`{"a":[1,"x"],"b":2}`)), op.ArgsDigest)
	// The projection keeps the result's digest and size, never the result.
	assert.Equal(t, events.Digest(out.Result), op.ResultDigest)
	assert.Equal(t, len(out.Result), op.ResultBytes)
	assert.Equal(t, op.ResultDigest, out.ResultDigest)
}

// A request in structured content mode (the CloudEvent as one JSON
// document) runs like a binary one, including the batched args fetch.
func TestStructuredModeRequestRuns(t *testing.T) {
	a := apptest.StartApp(t, app.Config{})
	c, nc := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ids []string
	for i := range 20 {
		req := events.Request{Workspace: "structured", Agent: "a", Tool: "echo", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		require.NoError(t, req.Validate())
		body, err := json.Marshal(map[string]any{
			"specversion": "1.0", "type": string(events.TypeRequested), "source": "test", "id": req.FingerprintHex(),
			"datacontenttype": "application/json", "data": req,
		})
		require.NoError(t, err)
		m := nats.NewMsg(events.RequestSubject("structured", "a"))
		m.Header.Set("Content-Type", "application/cloudevents+json")
		m.Data = body
		require.NoError(t, nc.PublishMsg(m))
		ids = append(ids, events.OpID(req.Fingerprint()))
	}
	for i, id := range ids {
		require.Eventually(t, func() bool {
			op, err := c.Op(ctx, id)
			return err == nil && op.State == events.StateCompleted
		}, 10*time.Second, 10*time.Millisecond)
		op, err := c.Op(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, events.Digest([]byte(fmt.Sprintf(`{"i":%d}`, i))), op.ResultDigest)
	}
}

// The reply carries the result byte for byte as its digest was taken,
// HTML characters and line separators included; the projection keeps that
// digest.
func TestResultDigestMatchesReply(t *testing.T) {
	a := apptest.StartApp(t, app.Config{})
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := c.Submit(ctx, events.Request{Workspace: "w", Agent: "a", Tool: "echo", Args: json.RawMessage("{\"html\":\"<a href='x'>&amp;</a>\",\"sep\":\"\u2028\"}")})
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, out.State)
	assert.Contains(t, string(out.Result), "<a href='x'>&amp;</a>")
	var op *events.Op
	require.Eventually(t, func() bool {
		op, err = c.Op(ctx, out.OpID)
		return err == nil && op.State == events.StateCompleted
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, events.Digest(out.Result), op.ResultDigest)
	assert.Equal(t, len(out.Result), op.ResultBytes)
}

// A start that fails closes what it opened and returns the error.
func TestStartFailsCleanly(t *testing.T) {
	a := apptest.StartApp(t, app.Config{})
	_, err := app.Start(context.Background(), app.Config{DataDir: t.TempDir(), Listen: a.Server.Addr().String()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "address already in use")
	_, err = app.Start(context.Background(), app.Config{DataDir: t.TempDir(), NATSURL: "nats://127.0.0.1:1"})
	require.Error(t, err)
}
