package store_test

import (
	"context"
	"math"
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
	pending, err := st.PendingScrubs(nil, 100)
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
	pending, err := st.PendingScrubs(nil, 2)
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
	pending, err := st.PendingScrubs(nil, 100)
	require.NoError(t, err)
	require.NoError(t, st.Scrubbed(pending...))
	// Records were JSON then.
	op0, err := st.Op(opID(0))
	require.NoError(t, err)
	raw, err := events.MarshalJSON(op0)
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
	assert.Equal(t, byte(0x01), raw[0], "rewritten in the binary form")
	op, err := st.Op(opID(0))
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, op.State)

	// Once done, never again: entries settled stay settled.
	pending, err = st.PendingScrubs(nil, 100)
	require.NoError(t, err)
	require.NoError(t, st.Scrubbed(pending...))
	n, err = st.IndexScrubs(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Empty(t, scrubIDs(t, st))
}

// The index lists ops in the order they ended, whatever order they began
// in, and a scrubber that passes the key it got to never sees the entries
// before it again, while an op that ends later still comes after it.
func TestPendingScrubsInTheOrderOpsEnded(t *testing.T) {
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hdr := func(i int) events.OpHeader { return events.OpHeader{OpID: opID(i), Workspace: "w"} }
	commit := func(seq uint64, steps ...func(b *store.Batch)) {
		t.Helper()
		b := st.NewBatch()
		for _, f := range steps {
			f(b)
		}
		b.SetApplied(seq)
		require.NoError(t, b.Commit(false))
	}
	apply := func(i int, data any, seq uint64) func(b *store.Batch) {
		return func(b *store.Batch) {
			op, err := b.Op(opID(i), false)
			require.NoError(t, err)
			require.NoError(t, op.Apply(data, seq, at))
		}
	}
	// Op 0 begins first and ends last.
	commit(3,
		apply(0, &events.Decided{OpHeader: hdr(0), Request: summary(100)}, 1),
		apply(1, &events.Denied{OpHeader: hdr(1), Request: summary(101), Code: "POLICY_DENIED"}, 2),
		apply(2, &events.Denied{OpHeader: hdr(2), Request: summary(102), Code: "POLICY_DENIED"}, 3))
	pending, err := st.PendingScrubs(nil, 10)
	require.NoError(t, err)
	require.Len(t, pending, 2)
	assert.Equal(t, []string{opID(1), opID(2)}, []string{pending[0].OpID, pending[1].OpID})
	require.NoError(t, st.Scrubbed(pending...))
	after := pending[1].Key()

	commit(5,
		apply(0, &events.Started{OpHeader: hdr(0), Attempt: "a", Claim: &events.Claim{Executor: "echo"}}, 4),
		apply(0, &events.Completed{OpHeader: hdr(0), Attempt: "a", ResultDigest: "sha256:r", ResultBytes: 2}, 5))
	pending, err = st.PendingScrubs(after, 10)
	require.NoError(t, err)
	require.Len(t, pending, 1, "the op that began first and ended last")
	assert.Equal(t, opID(0), pending[0].OpID)
	assert.Equal(t, uint64(100), pending[0].RequestSeq)
	again, err := st.PendingScrubs(pending[0].Key(), 10)
	require.NoError(t, err)
	assert.Empty(t, again)
}

// The live request floor is the lowest request of an op an executor may
// still read: ready or executing. Ended and held ops do not hold it down.
func TestLiveRequestFloor(t *testing.T) {
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	floor, err := st.LiveRequestFloor()
	require.NoError(t, err)
	assert.Equal(t, uint64(math.MaxUint64), floor, "nothing live")

	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hdr := func(i int) events.OpHeader { return events.OpHeader{OpID: opID(i), Workspace: "w"} }
	b := st.NewBatch()
	apply := func(i int, data any, seq uint64) {
		t.Helper()
		op, err := b.Op(opID(i), false)
		require.NoError(t, err)
		require.NoError(t, op.Apply(data, seq, at))
	}
	apply(0, &events.Denied{OpHeader: hdr(0), Request: summary(10), Code: "POLICY_DENIED"}, 1) // ended
	apply(1, &events.Held{OpHeader: hdr(1), Request: summary(11)}, 2)                          // moved out
	apply(2, &events.Decided{OpHeader: hdr(2), Request: summary(14)}, 3)                       // ready
	apply(3, &events.Decided{OpHeader: hdr(3), Request: summary(13)}, 4)
	apply(3, &events.Started{OpHeader: hdr(3), Attempt: "a", Claim: &events.Claim{Executor: "echo"}}, 5) // executing
	b.SetApplied(5)
	require.NoError(t, b.Commit(false))
	floor, err = st.LiveRequestFloor()
	require.NoError(t, err)
	assert.Equal(t, uint64(13), floor)

	b = st.NewBatch()
	apply(3, &events.Completed{OpHeader: hdr(3), Attempt: "a", ResultDigest: "sha256:r", ResultBytes: 2}, 6)
	b.SetApplied(6)
	require.NoError(t, b.Commit(false))
	floor, err = st.LiveRequestFloor()
	require.NoError(t, err)
	assert.Equal(t, uint64(14), floor, "the executing op ended")
}
