package app_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Through the whole pipeline: an agent's call reaches the tool server and
// its answer is the op's outcome, completed, failed or ambiguous.
func TestRemoteToolThroughAirlock(t *testing.T) {
	const subject = "tools.t"
	n := testenv.StartNATS(t, streams.Config{})
	srv, err := nats.Connect(n.Server.ClientURL())
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	on := func(subj string, h nats.MsgHandler) {
		sub, err := srv.Subscribe(subj, h)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	on(subject, func(m *nats.Msg) {
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
	on(subject+remote.StatusSuffix, func(m *nats.Msg) { _ = m.Respond([]byte(`{"v":1,"state":"running"}`)) })
	require.NoError(t, srv.Flush())
	r, err := remote.New(remote.Config{Conn: n.Conn, Tool: "t", Subject: subject, Timeout: 300 * time.Millisecond, StatusTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	a := apptest.StartApp(t, app.Config{NATSURL: n.Server.ClientURL(), Executors: []executor.Executor{r}})
	c, _ := apptest.Client(t, a.ClientURL(), producers.WithWait(10*time.Second))
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
