package store_test

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The filter of ended ops says "maybe" for every op that ended, whether it
// ended in this opening of the store or an earlier one, and "no" for
// nearly every other.
func TestMaybeEndedKnowsEveryEndedOp(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	require.NoError(t, err)
	at := time.Now()
	apply := func(id string, data any, seq uint64) {
		b := st.NewBatch()
		op, err := b.Op(id, false)
		require.NoError(t, err)
		require.NoError(t, op.Apply(data, seq, at))
		b.SetApplied(seq)
		require.NoError(t, b.Commit(false))
	}
	hdr := func(id string) events.OpHeader { return events.OpHeader{OpID: id, Workspace: "ws"} }
	sum := &events.Summary{Agent: "a", Tool: "echo"}
	// Ended before the store is opened again, ended after, and never.
	apply("op_before", &events.Denied{OpHeader: hdr("op_before"), Request: sum, Code: events.CodePolicyDenied}, 1)
	apply("op_live", &events.Decided{OpHeader: hdr("op_live"), Request: sum}, 2)
	require.NoError(t, st.Close())

	st, err = store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	require.Eventually(t, func() bool { return !st.MaybeEnded("op_never") }, 10*time.Second, time.Millisecond, "the filter is read")
	assert.True(t, st.MaybeEnded("op_before"))
	assert.False(t, st.MaybeEnded("op_live"), "not ended")
	apply("op_now", &events.Denied{OpHeader: hdr("op_now"), Request: sum, Code: events.CodePolicyDenied}, 3)
	assert.True(t, st.MaybeEnded("op_now"))
	// False positives are rare.
	positives := 0
	for i := range 100_000 {
		if st.MaybeEnded("op_" + string(rune('a'+i%26)) + time.Duration(i).String()) {
			positives++
		}
	}
	assert.Less(t, positives, 10)
}
