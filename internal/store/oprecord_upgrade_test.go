package store_test

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A store an earlier version wrote, with its op records in JSON, opens and
// answers as before; an op that changes is written back in the binary
// form, and the op that does not stays as it was.
func TestOpRecordsWrittenAsJSONStillRead(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	require.NoError(t, err)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hdr := func(i int) events.OpHeader { return events.OpHeader{OpID: opID(i), Workspace: "w"} }
	b := st.NewBatch()
	for i := range 2 {
		op, err := b.Op(opID(i), true)
		require.NoError(t, err)
		require.NoError(t, op.Apply(&events.Decided{OpHeader: hdr(i), Request: summary(uint64(100 + i)), Reason: "allowed"}, uint64(i+1), at))
	}
	b.SetApplied(2)
	require.NoError(t, b.Commit(true))
	want := map[string]string{}
	for i := range 2 {
		op, err := st.Op(opID(i))
		require.NoError(t, err)
		js, err := events.MarshalJSON(op)
		require.NoError(t, err)
		want[opID(i)] = string(js)
		raw, err := store.RawOp(st, opID(i))
		require.NoError(t, err)
		require.Equal(t, byte(0x01), raw[0], "written in the binary form")
		require.Less(t, len(raw), len(js))
		// As an earlier version wrote it.
		require.NoError(t, store.PutRaw(st, []byte("o/"+opID(i)), js))
	}
	require.NoError(t, st.Close())

	st, err = store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	for i := range 2 {
		op, err := st.Op(opID(i))
		require.NoError(t, err)
		js, err := events.MarshalJSON(op)
		require.NoError(t, err)
		assert.Equal(t, want[opID(i)], string(js))
	}
	ops, _, err := st.List(events.StateReady, "", "", 10)
	require.NoError(t, err)
	require.Len(t, ops, 2)

	// Op 0 moves on: read from its JSON, written back binary.
	b = st.NewBatch()
	op, err := b.Op(opID(0), false)
	require.NoError(t, err)
	require.Equal(t, events.StateReady, op.State)
	require.NoError(t, op.Apply(&events.Claimed{OpHeader: hdr(0), Attempt: "a"}, 3, at.Add(time.Second)))
	b.SetApplied(3)
	require.NoError(t, b.Commit(true))
	raw, err := store.RawOp(st, opID(0))
	require.NoError(t, err)
	assert.Equal(t, byte(0x01), raw[0])
	got, err := st.Op(opID(0))
	require.NoError(t, err)
	assert.Equal(t, events.StateExecuting, got.State)
	assert.Equal(t, "allowed", got.Reason)
	assert.Equal(t, uint64(100), got.RequestSeq)
	raw, err = store.RawOp(st, opID(1))
	require.NoError(t, err)
	assert.Equal(t, want[opID(1)], string(raw), "untouched")
}
