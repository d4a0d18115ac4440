package app_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// archived runs a projector over n's ops stream into the store in dir
// until it has applied until, with the archive read (and, with write,
// written in segments of segBytes), and stops it cleanly.
func archived(t *testing.T, n *testenv.NATS, dir string, until uint64, write bool, segBytes int) *projector.Projector {
	t.Helper()
	return projectWith(t, projector.Config{
		JetStream: n.JetStream, MaxBatch: 13,
		Archive: archive.New(n.JetStream), WriteArchive: write, SegmentBytes: segBytes, SegmentEvery: 5 * time.Millisecond,
	}, dir, until)
}

// opsInfo is the ops stream's state now.
func opsInfo(t *testing.T, n *testenv.NATS) jetstream.StreamState {
	t.Helper()
	st, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State
}

// segmentsOf reads every segment of the archive, in order.
func segmentsOf(t *testing.T, n *testenv.NATS) []*archive.Segment {
	t.Helper()
	ctx := context.Background()
	a := archive.New(n.JetStream)
	_, last, err := a.Tail(ctx)
	require.NoError(t, err)
	var out []*archive.Segment
	for seq := uint64(1); seq <= last; {
		s, at, err := a.Segment(ctx, seq)
		require.NoError(t, err)
		out = append(out, s)
		seq = at + 1
	}
	return out
}

// requireArchiveCopies checks that the segments follow each other from
// sequence 1 to at least through and hold each message of the ops stream
// in their ranges exactly as the stream stores it.
func requireArchiveCopies(t *testing.T, n *testenv.NATS, through uint64) []*archive.Segment {
	t.Helper()
	segs := segmentsOf(t, n)
	require.NotEmpty(t, segs)
	st, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	next := uint64(1)
	for i, s := range segs {
		require.Equal(t, next, s.From, "segment %d begins where the one before it ends", i)
		require.Greater(t, s.To, s.From, "segment %d", i)
		want := s.From
		for _, m := range s.Msgs {
			require.Equal(t, want, m.Seq, "segment %d holds every message of its range, in order", i)
			raw, err := st.GetMsg(context.Background(), m.Seq)
			require.NoError(t, err)
			require.Equal(t, raw.Subject, m.Subject, "seq %d", m.Seq)
			require.Equal(t, raw.Data, m.Data, "seq %d", m.Seq)
			require.Equal(t, raw.Time.UnixNano(), m.Time.UnixNano(), "seq %d", m.Seq)
			// A direct get names the message in headers of its own.
			for _, k := range []string{jetstream.StreamHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer, jetstream.SubjectHeader} {
				raw.Header.Del(k)
			}
			require.Equal(t, raw.Header, m.Header, "seq %d", m.Seq)
			want++
		}
		require.Equal(t, s.To, want, "segment %d ends after its last message", i)
		next = s.To
	}
	require.Greater(t, next, through, "the archive covers the stream through %d", through)
	return segs
}

// leavesOf is every leaf of the audit log in dir.
func leavesOf(t *testing.T, dir string) [][]byte {
	t.Helper()
	st, err := store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	var out [][]byte
	require.NoError(t, st.Leaves(0, func(_ int64, leaf []byte) error {
		out = append(out, slices.Clone(leaf)) // the store reuses leaf
		return nil
	}))
	return out
}

// The projector stores what it reads in segments that follow each other
// from the stream's first message, each a faithful copy; a projector that
// was ahead of the archive (its segments lost with a crash) reads again
// from the archive's end and stores what is missing.
func TestArchiveCopiesTheOpsStreamInSegments(t *testing.T) {
	// A stream that denies purges: the app that fills it keeps no
	// archive, and the projectors below write it.
	n := testenv.StartNATS(t, streams.Config{})
	fill(t, n, 60)
	last := opsInfo(t, n).LastSeq

	dir := t.TempDir()
	// Ahead of the archive: applied, nothing stored.
	p := archived(t, n, dir, last/2, false, 0)
	assert.Empty(t, segmentsOf(t, n))
	assert.Zero(t, p.Filled())
	archived(t, n, dir, last, true, 2<<10)
	segs := requireArchiveCopies(t, n, last)
	assert.Greater(t, len(segs), 3, "segments of about 2 KB each")
}

// Two projectors that store segments at once store each range once.
func TestTwoProjectorsStoreEachSegmentOnce(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	fill(t, n, 60)
	last := opsInfo(t, n).LastSeq
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { archived(t, n, t.TempDir(), last, true, 1<<10) })
	}
	wg.Wait()
	requireArchiveCopies(t, n, last)
}

// A projection rebuilt after the ops stream lost messages below the
// archive's end reads them from the segments, in their places: its ops
// and its audit log's leaves are the same as those of the projection
// built while the stream held them all. Without the archive they differ.
func TestProjectionFromAPurgedStreamMatches(t *testing.T) {
	for _, tc := range []struct {
		name   string
		purge  func(end uint64) jetstream.StreamPurgeOpt
		filled func(t *testing.T, filled uint64)
	}{
		// Op events only: rejections and records stay between them,
		// so the gaps are many.
		{"op events below the end", func(end uint64) jetstream.StreamPurgeOpt {
			return jetstream.WithPurgeSubject(events.OpSubjects)
		}, func(t *testing.T, filled uint64) { assert.Greater(t, filled, uint64(3), "gaps") }},
		{"everything below the end", nil, func(t *testing.T, filled uint64) { assert.Equal(t, uint64(1), filled, "one gap") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
			fill(t, n, 60)
			last := opsInfo(t, n).LastSeq
			live := t.TempDir()
			archived(t, n, live, last, true, 4<<10)
			requireArchiveCopies(t, n, last)
			wantOps, wantApplied := dump(t, live)
			wantLeaves := leavesOf(t, live)
			require.Len(t, wantLeaves, int(last))

			// Keep the last few messages in the stream; purge the rest.
			end := last - 5
			st, err := n.JetStream.Stream(context.Background(), streams.Ops)
			require.NoError(t, err)
			opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSequence(end)}
			if tc.purge != nil {
				opts = append(opts, tc.purge(end))
			}
			require.NoError(t, st.Purge(context.Background(), opts...))
			state := opsInfo(t, n)
			require.Less(t, state.Msgs, last-1, "purged")

			rebuilt := t.TempDir()
			p := archived(t, n, rebuilt, last, false, 0)
			tc.filled(t, p.Filled())
			gotOps, gotApplied := dump(t, rebuilt)
			assert.Equal(t, wantApplied, gotApplied)
			assert.Equal(t, wantOps, gotOps)
			assert.Equal(t, wantLeaves, leavesOf(t, rebuilt), "the same leaves, in the same order")

			// The same, without the archive, is not the same.
			without := t.TempDir()
			project(t, n.JetStream, without, 1024, last)
			gotOps, _ = dump(t, without)
			assert.NotEqual(t, wantOps, gotOps)
			assert.Less(t, len(leavesOf(t, without)), len(wantLeaves))
		})
	}
}
