package store_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The counts of ops by state follow every batch, survive a reopen, and are
// rebuilt from the state index for a store that has none.
func TestCountsFollowBatchesAndReopen(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	require.NoError(t, err)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := func(ready, executing, completed int64) map[events.State]int64 {
		m := map[events.State]int64{}
		for _, s := range events.AllStates {
			m[s] = 0
		}
		m[events.StateReady], m[events.StateExecuting], m[events.StateCompleted] = ready, executing, completed
		return m
	}
	assert.Equal(t, want(0, 0, 0), st.Counts())

	b := st.NewBatch()
	for i := range 5 {
		op, err := b.Op(opID(i), true)
		require.NoError(t, err)
		require.NoError(t, op.Apply(decided(i), uint64(i+1), at))
	}
	// Created and moved on in one batch: counted once, in its last state.
	op, err := b.Op(opID(0), false)
	require.NoError(t, err)
	require.NoError(t, op.Apply(&events.Claimed{OpHeader: events.OpHeader{OpID: opID(0), Workspace: "w"}, Attempt: "a"}, 6, at))
	b.SetApplied(6)
	require.NoError(t, b.Commit(false))
	assert.Equal(t, want(4, 1, 0), st.Counts())

	b = st.NewBatch()
	op, err = b.Op(opID(0), false)
	require.NoError(t, err)
	require.NoError(t, op.Apply(&events.Completed{OpHeader: events.OpHeader{OpID: opID(0), Workspace: "w"}, Attempt: "a", ResultDigest: events.Digest([]byte(`{}`)), ResultBytes: 2}, 7, at))
	b.SetApplied(7)
	b.Abort() // an aborted batch changes nothing
	assert.Equal(t, want(4, 1, 0), st.Counts())
	b = st.NewBatch()
	op, err = b.Op(opID(0), false)
	require.NoError(t, err)
	require.NoError(t, op.Apply(&events.Completed{OpHeader: events.OpHeader{OpID: opID(0), Workspace: "w"}, Attempt: "a", ResultDigest: events.Digest([]byte(`{}`)), ResultBytes: 2}, 7, at))
	b.SetApplied(7)
	require.NoError(t, b.Commit(true))
	assert.Equal(t, want(4, 0, 1), st.Counts())
	require.NoError(t, st.Close())

	st, err = store.Open(dir)
	require.NoError(t, err)
	assert.Equal(t, want(4, 0, 1), st.Counts())

	// A store from before counts were kept is counted at open.
	db := store.DB(st)
	require.NoError(t, db.DeleteRange([]byte("m/n/"), []byte("m/n0"), nil))
	require.NoError(t, db.Delete([]byte("m/counted"), nil))
	require.NoError(t, st.Close())
	st, err = store.OpenReadOnly(dir)
	require.NoError(t, err)
	assert.Equal(t, want(4, 0, 1), st.Counts(), "read-only: counted, not stored")
	require.NoError(t, st.Close())
	st, err = store.Open(dir)
	require.NoError(t, err)
	assert.Equal(t, want(4, 0, 1), st.Counts())
	_, closer, err := store.DB(st).Get([]byte("m/counted"))
	require.NoError(t, err, "the recount is stored")
	require.NoError(t, closer.Close())
	require.NoError(t, st.Close())

	// An older binary moved the projection on without the counts (a
	// downgrade and upgrade): the applied sequence no longer matches the
	// counts' and they are counted again.
	st, err = store.Open(dir)
	require.NoError(t, err)
	b = st.NewBatch()
	op, err = b.Op(opID(1), false)
	require.NoError(t, err)
	require.NoError(t, op.Apply(&events.Claimed{OpHeader: events.OpHeader{OpID: opID(1), Workspace: "w"}, Attempt: "a"}, 8, at))
	b.SetApplied(8)
	require.NoError(t, b.Commit(true))
	assert.Equal(t, want(3, 1, 1), st.Counts())
	// Rewind the counts as the older binary would have left them, at 7.
	db = store.DB(st)
	require.NoError(t, db.Set([]byte("m/n/ready"), be(4), nil))
	require.NoError(t, db.Set([]byte("m/n/executing"), be(0), nil))
	require.NoError(t, db.Set([]byte("m/counted"), be(7), nil))
	require.NoError(t, st.Close())
	st, err = store.Open(dir)
	require.NoError(t, err)
	assert.Equal(t, want(3, 1, 1), st.Counts(), "counted again: 7 is not the applied 8")

	// Counts that are wrong in a way that would go below zero never stop
	// a commit: the count stays at zero and the next open counts again.
	require.NoError(t, store.DB(st).Set([]byte("m/n/executing"), be(0), nil))
	require.NoError(t, store.DB(st).Set([]byte("m/n/ready"), be(99), nil))
	require.NoError(t, st.Close())
	st, err = store.Open(dir) // m/counted is 8 = applied: trusted, wrongly
	require.NoError(t, err)
	assert.Equal(t, want(99, 0, 1), st.Counts())
	b = st.NewBatch()
	op, err = b.Op(opID(1), false)
	require.NoError(t, err)
	require.NoError(t, op.Apply(&events.Completed{OpHeader: events.OpHeader{OpID: opID(1), Workspace: "w"}, Attempt: "a", ResultDigest: events.Digest([]byte(`{}`)), ResultBytes: 2}, 9, at))
	b.SetApplied(9)
	require.NoError(t, b.Commit(true))
	assert.Equal(t, want(99, 0, 2), st.Counts())
	// A later batch whose counts stay at or above zero does not make them
	// trusted again.
	b = st.NewBatch()
	op, err = b.Op(opID(2), false)
	require.NoError(t, err)
	require.NoError(t, op.Apply(&events.Claimed{OpHeader: events.OpHeader{OpID: opID(2), Workspace: "w"}, Attempt: "a"}, 10, at))
	b.SetApplied(10)
	require.NoError(t, b.Commit(true))
	assert.Equal(t, want(98, 1, 2), st.Counts())
	require.NoError(t, st.Close())
	st, err = store.Open(dir)
	require.NoError(t, err)
	assert.Equal(t, want(2, 1, 2), st.Counts(), "counted again")
	require.NoError(t, st.Close())
}

func be(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
