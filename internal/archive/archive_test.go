package archive_test

import (
	"context"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The stored ops floor never goes down: a process whose projection lags
// computes a lower floor than one another process purged below, and a
// retry that read the lower one would not wait for the ops that left
// below the higher (ADR 0026).
func TestTheOpsFloorNeverGoesDown(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	ctx := context.Background()
	ahead, behind := archive.New(n.JetStream), archive.New(n.JetStream)
	f, err := ahead.Floor(ctx)
	require.NoError(t, err)
	assert.Zero(t, f, "none stored")
	require.NoError(t, ahead.RaiseFloor(ctx, 1000))
	require.NoError(t, behind.RaiseFloor(ctx, 50))
	for _, a := range []*archive.Archive{ahead, behind} {
		f, err := a.Floor(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(1000), f)
	}
	require.NoError(t, behind.RaiseFloor(ctx, 1500))
	f, err = ahead.Floor(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1500), f)
}

// An archive stream made by the version before segments came compressed
// (compressed by the server, segments of version 1) is updated at the
// next start to store them as they come; its segments still read, and
// the next is stored after them.
func TestAnEarlierVersionsArchiveStillReads(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	ctx := context.Background()
	require.NoError(t, n.JetStream.DeleteStream(ctx, streams.Archive))
	old := streams.ArchiveConfig(streams.Config{})
	old.Compression = jetstream.S2Compression
	_, err := n.JetStream.CreateStream(ctx, old)
	require.NoError(t, err)
	first := sample()
	m := nats.NewMsg(events.ArchiveSubject)
	m.Header.Set(archive.HeaderFrom, "1")
	m.Header.Set(archive.HeaderTo, "13")
	first.From = 1
	m.Data = archive.EncodePlain(first)
	_, err = n.JetStream.PublishMsg(ctx, m)
	require.NoError(t, err)

	require.NoError(t, streams.Provision(ctx, n.JetStream, streams.Config{PurgeOps: true}))
	st, err := n.JetStream.Stream(ctx, streams.Archive)
	require.NoError(t, err)
	assert.Equal(t, jetstream.NoCompression, st.CachedInfo().Config.Compression)

	a := archive.New(n.JetStream)
	end, last, err := a.Tail(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(13), end)
	seg, at, err := a.Segment(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, last, at)
	require.Len(t, seg.Msgs, 3)
	assert.Equal(t, first.Msgs[2].Data, seg.Msgs[2].Data)

	next := &archive.Segment{From: 13, To: 15, Msgs: []archive.Msg{{Seq: 14, Subject: "airlock.v1.sys.policy", Data: []byte("x")}}}
	at2, err := a.Append(ctx, next, last)
	require.NoError(t, err)
	seg, _, err = a.Segment(ctx, at2)
	require.NoError(t, err)
	assert.Equal(t, uint64(15), seg.To)
	assert.Equal(t, []byte("x"), seg.Msgs[0].Data)
	raw, err := st.GetMsg(ctx, at2)
	require.NoError(t, err)
	assert.Equal(t, byte(2), raw.Data[0], "stored as this version writes")
}
