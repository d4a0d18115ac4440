package store_test

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The results index and the bytes each workspace keeps follow the
// completions and erasures of every batch (several in one batch too),
// survive a reopen, and list soonest-erased and oldest-op first.
func TestResultsIndex(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	require.NoError(t, err)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seq := uint64(0)
	apply := func(b *store.Batch, i int, data any) {
		t.Helper()
		op, err := b.Op(opID(i), false)
		require.NoError(t, err)
		seq++
		require.NoError(t, op.Apply(data, seq, at))
	}
	hdr := func(i int, ws string) events.OpHeader { return events.OpHeader{OpID: opID(i), Workspace: ws} }
	// Ops 0..3 in w, 4 in v; kept until at+(10-i)h, so op 3 expires first
	// and op 0 last; op 2's result is not kept.
	b := st.NewBatch()
	for i := range 5 {
		ws := "w"
		if i == 4 {
			ws = "v"
		}
		d := decided(i)
		d.Workspace = ws
		apply(b, i, d)
		apply(b, i, &events.Claimed{OpHeader: hdr(i, ws), Attempt: "a"})
		c := &events.Completed{OpHeader: hdr(i, ws), Attempt: "a", ResultDigest: "sha256:x", ResultBytes: 100 + i}
		if i != 2 {
			until := at.Add(time.Duration(10-i) * time.Hour)
			c.KeptUntil = &until
		}
		apply(b, i, c)
	}
	b.SetApplied(seq)
	require.NoError(t, b.Commit(true))

	check := func(wantW, wantV int64) {
		t.Helper()
		n, err := st.RetainedBytes("w")
		require.NoError(t, err)
		assert.Equal(t, wantW, n, "w")
		n, err = st.RetainedBytes("v")
		require.NoError(t, err)
		assert.Equal(t, wantV, n, "v")
	}
	check(100+101+103, 104)
	all, err := st.Retained()
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"w": 304, "v": 104}, all)

	due, err := st.KeptResults("", at.Add(7*time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, due, 2, "ops 4 and 3 are kept until 6h and 7h")
	assert.Equal(t, []string{opID(4), opID(3)}, []string{due[0].OpID, due[1].OpID})
	assert.Equal(t, at.Add(6*time.Hour), due[0].Until)
	assert.EqualValues(t, 104, due[0].Bytes)
	assert.Equal(t, "v", due[0].Workspace)

	oldest, err := st.OldestResults("w", 2)
	require.NoError(t, err)
	assert.Equal(t, []string{opID(0), opID(1)}, []string{oldest[0].OpID, oldest[1].OpID}, "by the op's first event")

	// Erase 0 and 3 (3 in the same batch as an unrelated transition).
	b = st.NewBatch()
	apply(b, 0, &events.ResultErased{OpHeader: hdr(0, "w"), Reason: events.ErasedEvicted, ResultDigest: "sha256:x", ResultBytes: 100})
	apply(b, 3, &events.ResultErased{OpHeader: hdr(3, "w"), Reason: events.ErasedExpired, ResultDigest: "sha256:x", ResultBytes: 103})
	apply(b, 3, &events.Scrubbed{OpHeader: hdr(3, "w"), RequestSeq: 1})
	b.SetApplied(seq)
	require.NoError(t, b.Commit(true))
	check(101, 104)
	require.NoError(t, st.Close())

	st, err = store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	check(101, 104)
	left, err := st.KeptResults("", time.Time{}, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{opID(4), opID(1)}, []string{left[0].OpID, left[1].OpID})
	oldest, err = st.OldestResults("w", 10)
	require.NoError(t, err)
	require.Len(t, oldest, 1)
	assert.Equal(t, opID(1), oldest[0].OpID)
}
