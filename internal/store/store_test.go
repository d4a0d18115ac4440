package store_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func opID(i int) string { return fmt.Sprintf("op_%032x", i) }

func decided(i int) *events.Decided {
	return &events.Decided{OpHeader: events.OpHeader{OpID: opID(i), Workspace: "w"}, Request: &events.Summary{Tool: "echo"}}
}

func TestBatchesSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	require.NoError(t, err)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	// One batch creates ten ops and moves three of them on.
	b := st.NewBatch()
	for i := range 10 {
		op, err := b.Op(opID(i), true)
		require.NoError(t, err)
		require.NoError(t, op.Apply(decided(i), uint64(i+1), at))
	}
	for i := range 3 {
		op, err := b.Op(opID(i), false)
		require.NoError(t, err)
		require.NoError(t, op.Apply(&events.Claimed{OpHeader: events.OpHeader{OpID: opID(i), Workspace: "w"}, Attempt: "a"}, uint64(11+i), at))
	}
	b.SetApplied(13)
	require.NoError(t, b.Commit(true))

	// A second batch completes one, reading it through the live cache.
	b = st.NewBatch()
	op, err := b.Op(opID(0), false)
	require.NoError(t, err)
	require.Equal(t, events.StateExecuting, op.State)
	require.NoError(t, op.Apply(&events.Completed{OpHeader: events.OpHeader{OpID: opID(0), Workspace: "w"}, Attempt: "a", ResultDigest: events.Digest([]byte(`{}`)), ResultBytes: 2}, 14, at))
	b.SetApplied(14)
	require.NoError(t, b.Commit(false))
	require.NoError(t, st.Close())

	st, err = store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	applied, err := st.Applied()
	require.NoError(t, err)
	assert.Equal(t, uint64(14), applied)
	got, err := st.Op(opID(0))
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, got.State)
	assert.Equal(t, uint64(14), got.Version)
	assert.Equal(t, uint64(1), got.FirstSeq)
	_, err = st.Op(opID(99))
	assert.ErrorIs(t, err, store.ErrNotFound)

	count := func(s events.State) int {
		ops, next, err := st.List(s, "", "", store.MaxPage)
		require.NoError(t, err)
		assert.Empty(t, next)
		return len(ops)
	}
	assert.Equal(t, 1, count(events.StateCompleted))
	assert.Equal(t, 2, count(events.StateExecuting))
	assert.Equal(t, 7, count(events.StateReady))
	assert.Equal(t, 10, count(events.StateNew))

	// Pages of three walk all ten in creation order, then stop.
	var ids []string
	cursor := ""
	for {
		page, next, err := st.List(events.StateNew, "", cursor, 3)
		require.NoError(t, err)
		for _, op := range page {
			ids = append(ids, op.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	want := make([]string, 10)
	for i := range want {
		want[i] = opID(i)
	}
	assert.Equal(t, want, ids)

	// Newest first, the same pages walk them backwards.
	ids, cursor = nil, ""
	for {
		page, next, err := st.ListNewest(events.StateNew, "", cursor, 3)
		require.NoError(t, err)
		for _, op := range page {
			ids = append(ids, op.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Reverse(want)
	assert.Equal(t, want, ids)
	ready, _, err := st.ListNewest(events.StateReady, "", "", 2)
	require.NoError(t, err)
	require.Len(t, ready, 2)
	assert.Equal(t, []string{opID(9), opID(8)}, []string{ready[0].ID, ready[1].ID})

	_, _, err = st.List(events.StateNew, "", "not-hex", 3)
	assert.ErrorIs(t, err, store.ErrBadCursor)
}

// Once the live cache is full, ops already in it are still kept current, and
// ops outside it are read from Pebble.
func TestLiveCacheStaysCurrentWhenFull(t *testing.T) {
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	store.SetLiveLimit(st, 2)
	at := time.Now().UTC()
	hdr := func(i int) events.OpHeader { return events.OpHeader{OpID: opID(i), Workspace: "w"} }
	b := st.NewBatch()
	for i := range 4 { // two cached, two not
		op, err := b.Op(opID(i), true)
		require.NoError(t, err)
		require.NoError(t, op.Apply(decided(i), uint64(i+1), at))
	}
	require.NoError(t, b.Commit(false))
	seq := uint64(10)
	for i := range 4 {
		b = st.NewBatch()
		op, err := b.Op(opID(i), false)
		require.NoError(t, err)
		require.NoError(t, op.Apply(&events.Claimed{OpHeader: hdr(i), Attempt: "a"}, seq, at))
		require.NoError(t, b.Commit(false))
		seq++
		b = st.NewBatch()
		op, err = b.Op(opID(i), false)
		require.NoError(t, err)
		require.Equal(t, events.StateExecuting, op.State, opID(i))
		require.NoError(t, op.Apply(&events.Completed{OpHeader: hdr(i), Attempt: "a", ResultDigest: events.Digest([]byte(`1`)), ResultBytes: 1}, seq, at))
		require.NoError(t, b.Commit(false))
		seq++
	}
	ops, _, err := st.List(events.StateCompleted, "", "", 10)
	require.NoError(t, err)
	assert.Len(t, ops, 4)
	for _, s := range []events.State{events.StateReady, events.StateExecuting} {
		ops, _, err := st.List(s, "", "", 10)
		require.NoError(t, err)
		assert.Empty(t, ops, s)
	}
}

// TestMissingTableIsUnreadable: a table the manifest names and the disk
// no longer holds (a manifest whose newest edits were damaged, and so
// dropped, names tables a compaction had already removed) makes the
// store unreadable, as a checksum that fails does: an operator is told
// to rebuild the projection, not shown a bare file error.
func TestMissingTableIsUnreadable(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	require.NoError(t, err)
	b := st.NewBatch()
	op, err := b.Op(opID(1), true)
	require.NoError(t, err)
	require.NoError(t, op.Apply(decided(1), 1, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	b.SetApplied(1)
	require.NoError(t, b.Commit(true))
	require.NoError(t, store.DB(st).Flush())
	require.NoError(t, st.Close())

	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	for _, f := range tables {
		require.NoError(t, os.Remove(f))
	}
	_, err = store.Open(dir)
	require.Error(t, err)
	assert.ErrorIs(t, err, audit.ErrUnreadable, "%v", err)
}
