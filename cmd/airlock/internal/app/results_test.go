package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/results"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A workspace over its byte bound loses its oldest results first, each
// with an evicted erasure in the log, and a fetch of one says so; the
// newest stay.
func TestResultsOverTheBoundEvictOldestFirst(t *testing.T) {
	// Each echo result is about 120 bytes; the bound keeps three.
	a := apptest.StartApp(t, app.Config{ResultRetainBytes: 400, HoldExpiryInterval: 50 * time.Millisecond})
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ops []string
	for i := range 6 {
		out, err := c.Submit(ctx, events.Request{Workspace: "small", Agent: "a1", Tool: "echo",
			Args: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("x", 100)))})
		require.NoError(t, err)
		require.Equal(t, events.StateCompleted, out.State)
		require.NotNil(t, out.ResultKeptUntil)
		ops = append(ops, out.OpID)
	}
	require.Eventually(t, func() bool {
		last, err := c.Op(ctx, ops[len(ops)-1])
		n, rerr := a.Store.RetainedBytes("small")
		return err == nil && last.State == events.StateCompleted && rerr == nil && n <= 400 && a.Eraser.Evicted() >= 3
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		op, err := c.Op(ctx, ops[2])
		return err == nil && op.ResultErased != ""
	}, 10*time.Second, 20*time.Millisecond, "the third erasure is folded")
	evicted := 0
	rstream, err := a.JetStream.Stream(ctx, streams.Results)
	require.NoError(t, err)
	for i, id := range ops {
		op, err := c.Op(ctx, id)
		require.NoError(t, err)
		require.NotZero(t, op.ResultSeq)
		_, ferr := c.Result(ctx, "a1", id)
		_, gerr := rstream.GetMsg(ctx, op.ResultSeq)
		if op.ResultErased != "" {
			evicted++
			assert.Equal(t, events.ErasedEvicted, op.ResultErased)
			assert.Equal(t, events.CodeResultExpired, events.CodeOf(ferr), "op %d", i)
			assert.ErrorIs(t, gerr, jetstream.ErrMsgNotFound, "op %d: its message is deleted", i)
			continue
		}
		assert.NoError(t, ferr, "op %d", i)
		assert.NoError(t, gerr, "op %d: its message stays", i)
	}
	assert.Equal(t, 3, evicted)
	for _, id := range ops[:3] {
		op, err := c.Op(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, events.ErasedEvicted, op.ResultErased, "the oldest go first")
	}
	assert.EqualValues(t, 3, a.Eraser.Evicted())
	// Another workspace is not touched.
	out, err := c.Submit(ctx, events.Request{Workspace: "other", Agent: "a1", Tool: "echo", Args: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	got, err := c.Result(ctx, "a1", out.OpID)
	require.NoError(t, err)
	assert.JSONEq(t, `{"n":1}`, string(got.Result))
}

// A result that does not match its digest is an error, never returned.
func TestResultFetchesAreCheckedAndOwned(t *testing.T) {
	a := apptest.StartApp(t, app.Config{})
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := c.Submit(ctx, events.Request{Workspace: "w", Agent: "a1", Tool: "echo", Args: json.RawMessage(`{"k":"v"}`)})
	require.NoError(t, err)
	got, err := c.Result(ctx, "a1", out.OpID)
	require.NoError(t, err)
	assert.JSONEq(t, `{"k":"v"}`, string(got.Result))
	assert.Equal(t, out.ResultDigest, got.ResultDigest)

	_, err = c.Result(ctx, "a2", out.OpID)
	assert.Equal(t, events.CodeNotRequester, events.CodeOf(err))
	assert.Contains(t, err.Error(), out.ResultDigest)
	assert.NotContains(t, err.Error(), `"v"`)
	_, err = c.Result(ctx, "a1", "op_00000000000000000000000000000000")
	assert.Equal(t, events.CodeNotFound, events.CodeOf(err))
	_, err = c.Result(ctx, "a1", "op_nope")
	assert.Equal(t, events.CodeInvalidQuery, events.CodeOf(err))

	// The completed event names its result by sequence: a result stored
	// later for the same op and attempt, on the same subject, is not the
	// one the op reads (the client's own check of what it reads is
	// producers' TestOpenChecksTheResultAgainstItsDigest).
	op, err := c.Op(ctx, out.OpID)
	require.NoError(t, err)
	require.NotZero(t, op.ResultSeq)
	stored, err := a.Results.Get(ctx, "w", out.OpID, op.Attempt, op.ResultSeq)
	require.NoError(t, err)
	plain, ok, err := a.Results.Open(out.OpID, stored)
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, `{"k":"v"}`, string(plain))
	forged, err := a.Results.Keep(ctx, executor.KeptResult{Workspace: "w", OpID: out.OpID, Attempt: op.Attempt, Agent: "a1",
		Result: []byte(`{"k":"forged"}`), Retention: events.Retention{TTLSeconds: 60}})
	require.NoError(t, err)
	require.Greater(t, forged.Seq, op.ResultSeq)
	got, err = c.Result(ctx, "a1", out.OpID)
	require.NoError(t, err)
	assert.JSONEq(t, `{"k":"v"}`, string(got.Result))
	// Read as another attempt's, the message at that sequence is not it.
	_, err = a.Results.Get(ctx, "w", out.OpID, op.Attempt+"x", op.ResultSeq)
	require.ErrorIs(t, err, results.ErrGone)
}

// A result that cannot be stored keeps the op out of completed: nothing
// reports success without it. Once it can be stored, the op completes
// with it, having run once.
func TestResultNotStoredKeepsTheOpOutOfCompleted(t *testing.T) {
	a := apptest.StartApp(t, app.Config{})
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, a.JetStream.DeleteStream(ctx, streams.Results))

	req := events.Request{Workspace: "w", Agent: "a1", Tool: "echo", Args: json.RawMessage(`{"kept":"later"}`)}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	out, err := c.Submit(sctx, req)
	scancel()
	require.NoError(t, err)
	assert.True(t, out.Pending, "no outcome while the result cannot be stored: %+v", out)
	op, err := c.Op(ctx, out.OpID)
	require.NoError(t, err)
	assert.Equal(t, events.StateExecuting, op.State)

	_, err = a.JetStream.CreateStream(ctx, streams.ResultsConfig(streams.Config{}))
	require.NoError(t, err)
	out, err = c.Submit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, out.State)
	assert.JSONEq(t, `{"kept":"later"}`, string(out.Result))
	require.NotNil(t, out.ResultKeptUntil)
	op, err = c.Op(ctx, out.OpID)
	require.NoError(t, err)
	assert.Equal(t, 1, op.Attempts, "ran once, recorded once")
}
