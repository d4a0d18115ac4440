package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/testexec"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The client against a whole Airlock: the outcomes Submit reports and the
// queries it answers.

func TestSubmitOutcomes(t *testing.T) {
	blocker := &testexec.Blocker{Dir: t.TempDir()}
	a := apptest.StartApp(t, app.Config{Executors: []executor.Executor{blocker}})
	c, _ := apptest.Client(t, a.ClientURL(), producers.WithWait(300*time.Millisecond), producers.WithPollInterval(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Bad input never leaves the client: the same codes as the gate's.
	_, err := c.Submit(ctx, events.Request{Workspace: "Bad", Agent: "a", Tool: "echo", Args: json.RawMessage(`{}`)})
	assert.True(t, errors.Is(err, &events.Error{Code: events.CodeInvalidName}), "%v", err)
	_, err = c.Submit(ctx, events.Request{Workspace: "w", Agent: "a", Tool: "echo", Args: json.RawMessage(`{"a":1,"a":2}`)})
	assert.Equal(t, events.CodeInvalidArgs, events.CodeOf(err))

	// A call still running when the wait runs out is pending, not an error.
	held := events.Request{Workspace: "w", Agent: "a", Tool: "block", Args: json.RawMessage(`{"job":1}`)}
	out, err := c.Submit(ctx, held)
	require.NoError(t, err)
	assert.True(t, out.Pending)
	assert.False(t, out.Terminal())
	assert.Equal(t, events.StateExecuting, out.State)
	assert.Regexp(t, `^op_[0-9a-f]{32}$`, out.OpID)

	// Released, a retry of the same request finds the same op completed.
	require.NoError(t, os.WriteFile(filepath.Join(blocker.Dir, "release"), nil, 0o600))
	var again producers.Outcome
	require.Eventually(t, func() bool {
		again, err = c.Submit(ctx, held)
		return err == nil && again.Terminal()
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, out.OpID, again.OpID)
	assert.Equal(t, events.StateCompleted, again.State)
	// The result reaches a Submit waiting when the runner replies; one
	// that came later learns its digest and size only (nothing keeps it).
	assert.Equal(t, events.Digest([]byte(`{"job":1}`)), again.ResultDigest)
	assert.Equal(t, len(`{"job":1}`), again.ResultBytes)
	if again.Result != nil {
		assert.JSONEq(t, `{"job":1}`, string(again.Result))
	}

	// A ctx deadline shorter than the wait also gives a pending outcome
	// (blocked again, so the op cannot end first).
	require.NoError(t, os.Remove(filepath.Join(blocker.Dir, "release")))
	short, scancel := context.WithTimeout(ctx, time.Millisecond)
	defer scancel()
	out, err = c.Submit(short, events.Request{Workspace: "w", Agent: "a", Tool: "block", Args: json.RawMessage(`{"job":2}`)})
	require.NoError(t, err)
	assert.True(t, out.Pending)

	// A cancelled ctx is an error.
	cancelled, ccancel := context.WithCancel(ctx)
	ccancel()
	_, err = c.Submit(cancelled, events.Request{Workspace: "w", Agent: "a", Tool: "echo", Args: json.RawMessage(`{"job":3}`)})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestQueries(t *testing.T) {
	a := apptest.StartApp(t, app.Config{})
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	for i := range 25 {
		out, err := c.Submit(ctx, events.Request{Workspace: "q", Agent: "a", Tool: "echo", Args: json.RawMessage(`{}`), IdempotencyKey: string(rune('a' + i))})
		require.NoError(t, err)
		ids = append(ids, out.OpID)
	}
	denied, err := c.Submit(ctx, events.Request{Workspace: "q", Agent: "a", Tool: "unknown_tool", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, events.StateDenied, denied.State)

	// Pages of 10 in creation order, until the cursor runs out.
	var seen []string
	require.Eventually(t, func() bool {
		seen = nil
		q := events.ListQuery{State: "completed", Limit: 10}
		for {
			page, err := c.List(ctx, q)
			if err != nil {
				return false
			}
			for _, op := range page.Ops {
				seen = append(seen, op.ID)
			}
			if page.Next == "" {
				return len(seen) == 25
			}
			q.Cursor = page.Next
		}
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, ids, seen)

	// The projection trails the stream (the denied op came last).
	var all *events.ListResult
	require.Eventually(t, func() bool {
		all, err = c.List(ctx, events.ListQuery{Limit: 1000})
		return err == nil && len(all.Ops) == 26
	}, 10*time.Second, 20*time.Millisecond)
	assert.Empty(t, all.Next)

	op, err := c.Op(ctx, denied.OpID)
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, op.State)
	assert.Equal(t, events.CodeCapabilityDenied, op.ErrorCode)

	for _, tc := range []struct {
		name string
		err  error
		code events.Code
	}{
		{"unknown op", errOf(c.Op(ctx, "op_00000000000000000000000000000000")), events.CodeNotFound},
		{"bad op id", errOf(c.Op(ctx, "nope")), events.CodeInvalidQuery},
		{"bad state", errOf(c.List(ctx, events.ListQuery{State: "napping"})), events.CodeInvalidQuery},
		{"bad limit", errOf(c.List(ctx, events.ListQuery{Limit: 5000})), events.CodeInvalidQuery},
		{"bad cursor", errOf(c.List(ctx, events.ListQuery{Cursor: "zz"})), events.CodeInvalidQuery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.code, events.CodeOf(tc.err), "%v", tc.err)
		})
	}
}

func errOf[T any](_ T, err error) error { return err }
