package remote_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/app"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Through the whole pipeline: an agent's call reaches the tool server and
// its answer is the op's outcome, completed, failed or ambiguous.
func TestThroughAirlock(t *testing.T) {
	g := newRig(t)
	g.on(t, subject, func(m *nats.Msg) {
		var req remote.Request
		if err := json.Unmarshal(m.Data, &req); err != nil {
			return
		}
		switch string(req.Args) {
		case `{"do":"fail"}`:
			_ = m.Respond([]byte(`{"v":1,"error":{"code":"QUOTA_EXCEEDED","message":"try tomorrow"}}`))
		case `{"do":"nothing"}`: // the answer is lost
		default:
			body, _ := json.Marshal(remote.Reply{V: 1, Result: json.RawMessage(`{"op":"` + req.OpID + `","ws":"` + req.Workspace + `"}`)})
			_ = m.Respond(body)
		}
	})
	g.on(t, status, answer(`{"v":1,"state":"running"}`))
	r := g.remote(t)
	a := testenv.StartApp(t, app.Config{NATSURL: g.n.Server.ClientURL(), Executors: []executor.Executor{r}})
	c, _ := testenv.Client(t, a.ClientURL(), producers.WithWait(10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	out, err := c.Submit(ctx, events.Request{Workspace: "w", Agent: "a", Tool: "t", Args: json.RawMessage(`{"do":"work"}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State)
	assert.JSONEq(t, `{"op":"`+out.OpID+`","ws":"w"}`, string(out.Result))

	out, err = c.Submit(ctx, events.Request{Workspace: "w", Agent: "a", Tool: "t", Args: json.RawMessage(`{"do":"fail"}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateFailed, out.State)
	assert.Equal(t, events.CodeExecutorFailed, out.Code)
	assert.Contains(t, out.Message, "QUOTA_EXCEEDED")

	out, err = c.Submit(ctx, events.Request{Workspace: "w", Agent: "a", Tool: "t", Args: json.RawMessage(`{"do":"nothing"}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateAmbiguous, out.State)
	assert.Equal(t, events.CodeAmbiguous, out.Code)
	assert.Contains(t, out.Message, "status: running")
}
