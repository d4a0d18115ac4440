package app_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/app"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEchoRunsEndToEnd(t *testing.T) {
	a := testenv.StartApp(t, app.Config{})
	c, _ := testenv.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := c.Submit(ctx, events.Request{Workspace: "ws1", Agent: "a1", Tool: "echo", Args: json.RawMessage(`{"b": 2, "a": [1, "x"]}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State)
	assert.JSONEq(t, `{"a":[1,"x"],"b":2}`, string(out.Result))
	// decided, claimed, completed: the projector has folded all three.
	require.NoError(t, a.Projector.WaitApplied(ctx, 3))
	op, err := c.Op(ctx, out.OpID)
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, op.State)
	assert.Equal(t, 1, op.Attempts)
	assert.Equal(t, "echo", op.Tool)
	assert.Equal(t, "read", op.Class)
	assert.Equal(t, events.ArgsDigest([]byte(`{"a":[1,"x"],"b":2}`)), op.ArgsDigest)
	assert.JSONEq(t, `{"a":[1,"x"],"b":2}`, string(op.Result))
}
