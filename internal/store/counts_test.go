package store_test

import (
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
}
