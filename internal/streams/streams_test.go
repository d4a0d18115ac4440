package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An AIRLOCK_OPS made before the stream republished what it stores (an
// upgrade) gets the republish at the next Provision, keeps its messages,
// and republishes what it stores from then on.
func TestProvisionAddsRepublishToAnOlderStream(t *testing.T) {
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect("", nats.InProcessServer(s))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	old := streams.OpsConfig(streams.Config{})
	old.RePublish = nil
	_, err = js.CreateStream(ctx, old)
	require.NoError(t, err)
	_, err = js.Publish(ctx, events.ModeSubject("w"), []byte(`{}`))
	require.NoError(t, err)

	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	st, err := js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	info := st.CachedInfo()
	require.NotNil(t, info.Config.RePublish)
	assert.Equal(t, events.LiveSubjects, info.Config.RePublish.Destination)
	assert.Equal(t, uint64(1), info.State.Msgs, "kept")

	live, err := nc.SubscribeSync(events.LiveSubjects)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	_, err = js.Publish(ctx, events.ModeSubject("w"), []byte(`{"n":2}`))
	require.NoError(t, err)
	m, err := live.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, events.LiveSubject(events.ModeSubject("w")), m.Subject)
	assert.Equal(t, "2", m.Header.Get(jetstream.SequenceHeader))
	assert.Equal(t, `{"n":2}`, string(m.Data))

	// Provisioning again changes nothing.
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
}
