package streams_test

import (
	"context"
	"fmt"
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

// startServer starts an embedded server with JetStream and connects to it
// in process.
func startServer(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect("", nats.InProcessServer(s))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// An AIRLOCK_OPS made before the stream republished what it stores (an
// upgrade) gets the republish at the next Provision, keeps its messages,
// and republishes what it stores from then on.
func TestProvisionAddsRepublishToAnOlderStream(t *testing.T) {
	nc, js := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error

	old := streams.OpsConfig(streams.Config{})
	old.RePublish = nil
	_, err = js.CreateStream(ctx, old)
	require.NoError(t, err)
	_, err = js.Publish(ctx, events.ModeSubject("w"), []byte(`{}`))
	require.NoError(t, err)

	require.NoError(t, streams.Provision(ctx, js, streams.Config{Live: true}))
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
	require.NoError(t, streams.Provision(ctx, js, streams.Config{Live: true}))
}

// SetLive turns the republish on and off and changes nothing else: the
// messages stay, the rest of the config (an operator's limit included)
// stays, and only what is stored while it is on is republished.
func TestSetLiveTogglesOnlyTheRepublish(t *testing.T) {
	nc, js := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error

	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	on, err := streams.Live(ctx, js)
	require.NoError(t, err)
	assert.False(t, on, "provisioned without Live")
	cfg := streams.OpsConfig(streams.Config{})
	cfg.MaxBytes = 1 << 30 // an operator's own limit
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	live, err := nc.SubscribeSync(events.LiveSubjects)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	publish := func(n int) {
		t.Helper()
		_, err := js.Publish(ctx, events.ModeSubject("w"), fmt.Appendf(nil, `{"n":%d}`, n))
		require.NoError(t, err)
	}
	publish(1) // off: not republished

	changed, err := streams.SetLive(ctx, js, true)
	require.NoError(t, err)
	assert.True(t, changed)
	changed, err = streams.SetLive(ctx, js, true)
	require.NoError(t, err)
	assert.False(t, changed, "already on")
	publish(2)
	m, err := live.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, `{"n":2}`, string(m.Data), "the first message stored while on")
	assert.Equal(t, "2", m.Header.Get(jetstream.SequenceHeader))

	changed, err = streams.SetLive(ctx, js, false)
	require.NoError(t, err)
	assert.True(t, changed)
	publish(3)
	_, err = live.NextMsg(200 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout, "off: not republished")

	st, err := js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	info := st.CachedInfo()
	assert.Equal(t, uint64(3), info.State.Msgs)
	assert.Nil(t, info.Config.RePublish)
	assert.Equal(t, int64(1<<30), info.Config.MaxBytes, "the rest of the config is kept")
}

// Turning the feed on and off across starts keeps what an operator set on
// the stream by hand: only a difference in Airlock's own settings makes
// Provision rewrite the config.
func TestProvisionKeepsHandSetLimitsAcrossTheFeed(t *testing.T) {
	_, js := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error

	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	cfg := streams.OpsConfig(streams.Config{})
	cfg.MaxBytes = 1 << 30
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	for _, live := range []bool{true, false, true} {
		_, err = streams.SetLive(ctx, js, !live) // left by the last run
		require.NoError(t, err)
		require.NoError(t, streams.Provision(ctx, js, streams.Config{Live: live}))
		st, err := js.Stream(ctx, streams.Ops)
		require.NoError(t, err)
		info := st.CachedInfo()
		assert.Equal(t, live, info.Config.RePublish != nil)
		assert.Equal(t, int64(1<<30), info.Config.MaxBytes, "kept, live %v", live)
	}
}

// What a new ops stream's purges keep (ArchiveKeep, ADR 0030) is recorded
// in its metadata and read back from it; a stream made before, with none,
// keeps none through every later Provision, whatever its config asks,
// and so does one made with a value: the processes of a deployment all
// read the stream's.
func TestOpsArchiveKeepIsTheStreams(t *testing.T) {
	_, js := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keep := func() uint64 {
		st, err := js.Stream(ctx, streams.Ops)
		require.NoError(t, err)
		return streams.OpsArchiveKeep(st.CachedInfo().Config)
	}

	// Made before ArchiveKeep: none, and Provision adds none, also when
	// it updates the stream for another setting.
	_, err := js.CreateStream(ctx, streams.OpsConfig(streams.Config{PurgeOps: true}))
	require.NoError(t, err)
	require.NoError(t, streams.Provision(ctx, js, streams.Config{PurgeOps: true, ArchiveKeep: 100, Duplicates: 3 * time.Minute}))
	assert.Zero(t, keep())
	st, err := js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	assert.Equal(t, 3*time.Minute, st.CachedInfo().Config.Duplicates, "updated")
	require.NoError(t, js.DeleteStream(ctx, streams.Ops))

	// Made with it: recorded, and kept by an update that asks for another.
	require.NoError(t, streams.Provision(ctx, js, streams.Config{PurgeOps: true, ArchiveKeep: 100}))
	assert.Equal(t, uint64(100), keep())
	require.NoError(t, streams.Provision(ctx, js, streams.Config{PurgeOps: true, ArchiveKeep: 7, Duplicates: 3 * time.Minute}))
	assert.Equal(t, uint64(100), keep())

	// A stream that keeps every op's events purges nothing: none recorded.
	assert.Nil(t, streams.OpsConfig(streams.Config{ArchiveKeep: 100}).Metadata)
	assert.Zero(t, streams.OpsArchiveKeep(jetstream.StreamConfig{Metadata: map[string]string{streams.MetaArchiveKeep: "many"}}))
}
