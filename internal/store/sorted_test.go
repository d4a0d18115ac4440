package store

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Writes applied in key order leave what the same writes in their own
// order leave: for a key written more than once, the last write.
func TestSortedWritesKeepTheLastWriteOfAKey(t *testing.T) {
	plain, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: quietLogger{}})
	require.NoError(t, err)
	defer plain.Close()
	sortedDB, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: quietLogger{}})
	require.NoError(t, err)
	defer sortedDB.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	var reuse *pebble.Batch
	for round := range 20 {
		pb := plain.NewBatch()
		s := &sorted{}
		for i := range 500 {
			key := []byte(fmt.Sprintf("k/%03d", rng.IntN(100)))
			if rng.IntN(4) == 0 {
				require.NoError(t, pb.Delete(key, nil))
				require.NoError(t, s.Delete(key, nil))
				continue
			}
			value := []byte(fmt.Sprintf("%d.%d", round, i))
			require.NoError(t, pb.Set(key, value, nil))
			require.NoError(t, s.Set(key, value, nil))
		}
		require.NoError(t, pb.Commit(pebble.NoSync))
		// Each round after the first fills the batch of the round before,
		// reset, as a store's commits do.
		sb, err := s.batch(sortedDB, reuse)
		require.NoError(t, err)
		require.NoError(t, sb.Commit(pebble.NoSync))
		reuse = sb
		require.NoError(t, pb.Close())
	}
	require.NoError(t, reuse.Close())
	assert.Equal(t, dumpDB(t, plain), dumpDB(t, sortedDB))
}

func dumpDB(t *testing.T, db *pebble.DB) map[string]string {
	t.Helper()
	it, err := db.NewIter(nil)
	require.NoError(t, err)
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	require.NotEmpty(t, out)
	return out
}
