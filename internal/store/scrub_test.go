package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// summary is a request summary naming request message seq.
func summary(seq uint64) *events.Summary {
	return &events.Summary{Tool: "echo", Agent: "a", ArgsDigest: "sha256:x", RequestSeq: seq}
}

func scrubIDs(t *testing.T, st *store.Store) map[string]uint64 {
	t.Helper()
	pending, err := st.PendingScrubs(100)
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, p := range pending {
		out[p.OpID] = p.RequestSeq
	}
	return out
}

// The batch that makes an op terminal indexes its request for erasure, in
// the same commit; ops that are not terminal are never indexed, and an op
// is indexed once, however many terminal-state events follow.
func TestCommitIndexesTerminalOpsForScrubbing(t *testing.T) {
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hdr := func(i int) events.OpHeader { return events.OpHeader{OpID: opID(i), Workspace: "w"} }
	apply := func(b *store.Batch, i int, data any, seq uint64) {
		t.Helper()
		op, err := b.Op(opID(i), false)
		require.NoError(t, err)
		require.NoError(t, op.Apply(data, seq, at))
	}

	b := st.NewBatch()
	apply(b, 0, &events.Decided{OpHeader: hdr(0), Request: summary(100)}, 1)                       // ready
	apply(b, 1, &events.Held{OpHeader: hdr(1), Request: summary(101)}, 2)                          // held
	apply(b, 2, &events.Denied{OpHeader: hdr(2), Request: summary(102), Code: "POLICY_DENIED"}, 3) // terminal at once
	apply(b, 3, &events.Decided{OpHeader: hdr(3), Request: summary(103)}, 4)
	apply(b, 3, &events.Claimed{OpHeader: hdr(3), Attempt: "a"}, 5)
	b.SetApplied(5)
	require.NoError(t, b.Commit(false))
	assert.Equal(t, map[string]uint64{opID(2): 102}, scrubIDs(t, st), "only the terminal op")

	b = st.NewBatch()
	apply(b, 3, &events.Completed{OpHeader: hdr(3), Attempt: "a", ResultDigest: "sha256:r", ResultBytes: 2}, 6)
	apply(b, 1, &events.Expired{OpHeader: hdr(1), HoldID: "h"}, 7)
	b.SetApplied(7)
	require.NoError(t, b.Commit(false))
	assert.Equal(t, map[string]uint64{opID(1): 101, opID(2): 102, opID(3): 103}, scrubIDs(t, st))

	// Settled entries go; a scrubbed event on a terminal op does not bring
	// its entry back.
	pending, err := st.PendingScrubs(2)
	require.NoError(t, err)
	require.Len(t, pending, 2, "the limit holds")
	require.NoError(t, st.Scrubbed(pending...))
	b = st.NewBatch()
	apply(b, 2, &events.Scrubbed{OpHeader: hdr(2), RequestSeq: 102}, 8)
	b.SetApplied(8)
	require.NoError(t, b.Commit(false))
	left := scrubIDs(t, st)
	assert.Len(t, left, 1)
	assert.NotContains(t, left, opID(2))
	assert.NotContains(t, left, opID(0), "a ready op keeps its request")
}

// A store written before the index existed is indexed once: every
// terminal op, and an op whose value still holds a result loses it.
func TestIndexScrubsBackfillsOnce(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	require.NoError(t, err)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b := st.NewBatch()
	for i := range 5 {
		op, err := b.Op(opID(i), true)
		require.NoError(t, err)
		h := events.OpHeader{OpID: opID(i), Workspace: "w"}
		if i%2 == 0 {
			require.NoError(t, op.Apply(&events.Denied{OpHeader: h, Request: summary(uint64(200 + i)), Code: "POLICY_DENIED"}, uint64(i+1), at))
		} else {
			require.NoError(t, op.Apply(&events.Held{OpHeader: h, Request: summary(uint64(200 + i))}, uint64(i+1), at))
		}
	}
	b.SetApplied(5)
	require.NoError(t, b.Commit(true))
	// As an earlier version left it: no index, and a result in one op.
	pending, err := st.PendingScrubs(100)
	require.NoError(t, err)
	require.NoError(t, st.Scrubbed(pending...))
	raw, err := store.RawOp(st, opID(0))
	require.NoError(t, err)
	stale := append(raw[:len(raw)-1:len(raw)-1], []byte(`,"result":{"secret":"PLAINTEXT-MARKER"}}`)...)
	require.NoError(t, store.PutRaw(st, []byte("o/"+opID(0)), stale))
	require.NoError(t, st.Close())

	st, err = store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	n, err := st.IndexScrubs(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, map[string]uint64{opID(0): 200, opID(2): 202, opID(4): 204}, scrubIDs(t, st))
	raw, err = store.RawOp(st, opID(0))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "PLAINTEXT-MARKER")
	op, err := st.Op(opID(0))
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, op.State)

	// Once done, never again: entries settled stay settled.
	pending, err = st.PendingScrubs(100)
	require.NoError(t, err)
	require.NoError(t, st.Scrubbed(pending...))
	n, err = st.IndexScrubs(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Empty(t, scrubIDs(t, st))
}
