package producers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOptionsValidate(t *testing.T) {
	for _, o := range []producers.Option{
		producers.WithWait(0), producers.WithPublishTries(0), producers.WithPublishTries(101),
		producers.WithSource(""), producers.WithPollInterval(time.Millisecond), producers.WithPublishTimeout(0),
	} {
		_, err := producers.New(nil, o)
		assert.Error(t, err)
	}
}

// A request whose publish is never acknowledged (something takes the
// subject, no stream answers) is pending, not an error: had JetStream
// stored it, it would run.
func TestUnacknowledgedSubmitIsPending(t *testing.T) {
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	require.NoError(t, err)
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	silent, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer silent.Close()
	_, err = silent.Subscribe(events.RequestSubject("ws", "ag"), func(*nats.Msg) {})
	require.NoError(t, err)
	require.NoError(t, silent.Flush())

	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	c, err := producers.New(nc, producers.WithPublishTries(2), producers.WithPublishTimeout(100*time.Millisecond), producers.WithWait(time.Minute))
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	out, err := c.Submit(context.Background(), events.Request{Workspace: "ws", Agent: "ag", Tool: "echo", Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	assert.True(t, out.Pending)
	assert.NotEmpty(t, out.OpID)
	assert.Less(t, time.Since(start), 30*time.Second, "two tries of 100ms, not the whole wait")
}
