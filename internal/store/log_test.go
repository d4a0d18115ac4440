package store_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// leafOf is the leaf of a decided event of op i at stream sequence seq.
func leafOf(seq uint64, i int) *audit.Leaf {
	d := &events.Decided{OpHeader: events.OpHeader{OpID: opID(i), Workspace: "w"},
		Request: &events.Summary{Agent: "a", Tool: "echo", ArgsDigest: events.Digest([]byte(fmt.Sprint(i)))}, PolicyHash: "sha256:p"}
	subj := events.OpEventSubject("w", opID(i), "echo", events.TypeDecided)
	return audit.NewLeaf("AIRLOCK_OPS", subj, seq, t0.Add(time.Duration(seq)*time.Millisecond), events.TypeDecided,
		fmt.Sprintf("id%d", seq), "airlock/gate", t0.Format(time.RFC3339Nano), []byte(fmt.Sprint(seq)), d)
}

// buildLog appends n leaves in batches of batch, signing a checkpoint after
// every batch, and returns the key.
func buildLog(t testing.TB, st *store.Store, k *audit.Key, n, batch int) {
	t.Helper()
	for i := 0; i < n; i += batch {
		b := st.NewBatch()
		for j := i; j < min(i+batch, n); j++ {
			l := leafOf(uint64(j+1), j)
			require.NoError(t, b.AppendLeaf(l.Encode(), l.Op))
		}
		b.SetApplied(uint64(min(i+batch, n)))
		_, err := b.Checkpoint(k)
		require.NoError(t, err)
		require.NoError(t, b.Commit(false))
	}
}

// newLog is a store, closed when the test ends, holding a log of n
// leaves appended in batches of batch, and the log's key.
func newLog(t *testing.T, n, batch int) (*store.Store, *audit.Key) {
	t.Helper()
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	k := newKey(t)
	buildLog(t, st, k, n, batch)
	return st, k
}

func newKey(t testing.TB) *audit.Key {
	k, created, err := audit.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	require.True(t, created)
	return k
}

func key(prefix string, i int64) []byte {
	return binary.BigEndian.AppendUint64([]byte(prefix), uint64(i))
}

func verify(t *testing.T, st *store.Store, k *audit.Key, trusted ...audit.Trusted) *audit.Report {
	t.Helper()
	rep, err := audit.Verify(st, audit.Options{Verifier: k.Verifier, Trusted: trusted})
	require.NoError(t, err)
	return rep
}

func TestLogVerifiesAndSurvivesReopen(t *testing.T) {
	dir, k := t.TempDir(), newKey(t)
	st, err := store.Open(dir)
	require.NoError(t, err)
	buildLog(t, st, k, 100, 7)
	require.NoError(t, st.Close())

	st, err = store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	// Appending after a reopen reads the frontier back from Pebble.
	buildLog2 := func() {
		b := st.NewBatch()
		for j := 100; j < 130; j++ {
			l := leafOf(uint64(j+1), j)
			require.NoError(t, b.AppendLeaf(l.Encode(), l.Op))
		}
		b.SetApplied(130)
		_, err := b.Checkpoint(k)
		require.NoError(t, err)
		require.NoError(t, b.Commit(false))
	}
	buildLog2()
	rep := verify(t, st, k)
	require.True(t, rep.OK(), "%+v", rep.Problems)
	assert.Equal(t, int64(130), rep.Size)
	assert.Equal(t, int64(130), rep.Leaves)
	assert.Equal(t, tlog.StoredHashCount(130), rep.Hashes)
	assert.Equal(t, int64(130), rep.CheckpointSize)
	assert.Equal(t, 16, rep.Checkpoints)

	// The root is the one a fresh in-memory tree of the same leaves has.
	app := audit.NewAppender(0, nil)
	for j := range 130 {
		_, _, err := app.Append(leafOf(uint64(j+1), j).Encode())
		require.NoError(t, err)
	}
	root, err := app.TreeHash()
	require.NoError(t, err)
	assert.Equal(t, root.String(), rep.Root)

	idx, err := st.OpLeaves(opID(42))
	require.NoError(t, err)
	assert.Equal(t, []int64{42}, idx)
}

// A batch that is aborted leaves nothing behind: the next batch's leaves
// follow the last committed one.
func TestAbortedBatchLeavesNoGap(t *testing.T) {
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	k := newKey(t)
	buildLog(t, st, k, 10, 10)
	b := st.NewBatch()
	l := leafOf(11, 10)
	require.NoError(t, b.AppendLeaf(l.Encode(), l.Op))
	b.Abort()
	buildLog(t, st, k, 0, 1)
	b = st.NewBatch()
	require.NoError(t, b.AppendLeaf(l.Encode(), l.Op))
	b.SetApplied(11)
	_, err = b.Checkpoint(k)
	require.NoError(t, err)
	require.NoError(t, b.Commit(false))
	rep := verify(t, st, k)
	require.True(t, rep.OK(), "%+v", rep.Problems)
	assert.Equal(t, int64(11), rep.Size)
}

func TestCheckpointsArePruned(t *testing.T) {
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	store.SetMaxCheckpoints(st, 5)
	k := newKey(t)
	buildLog(t, st, k, 40, 4)
	sizes, _, err := st.Checkpoints()
	require.NoError(t, err)
	assert.Equal(t, []int64{24, 28, 32, 36, 40}, sizes)
	rep := verify(t, st, k)
	require.True(t, rep.OK(), "%+v", rep.Problems)

	// Signing again at the same size replaces; the count stays right.
	b := st.NewBatch()
	_, err = b.Checkpoint(k)
	require.NoError(t, err)
	require.NoError(t, b.Commit(false))
	sizes, _, err = st.Checkpoints()
	require.NoError(t, err)
	assert.Equal(t, []int64{24, 28, 32, 36, 40}, sizes)
}

// The tamper matrix: each change to a sound log is found, with the exact
// status and index.
func TestTamperMatrix(t *testing.T) {
	const n = 64 // leaves, in batches of 8: checkpoints at 8, 16, ... 64
	flip := func(db *pebble.DB, k []byte) {
		v, closer, err := db.Get(k)
		if err != nil {
			panic(err)
		}
		b := append([]byte{}, v...)
		closer.Close()
		b[len(b)/2] ^= 0x01
		if err := db.Set(k, b, pebble.Sync); err != nil {
			panic(err)
		}
	}
	get := func(db *pebble.DB, k []byte) []byte {
		v, closer, err := db.Get(k)
		if err != nil {
			panic(err)
		}
		defer closer.Close()
		return append([]byte{}, v...)
	}
	set := func(db *pebble.DB, k, v []byte) {
		if err := db.Set(k, v, pebble.Sync); err != nil {
			panic(err)
		}
	}
	del := func(db *pebble.DB, k []byte) {
		if err := db.Delete(k, pebble.Sync); err != nil {
			panic(err)
		}
	}
	size := func(db *pebble.DB, s int64) { set(db, []byte("t/size"), binary.BigEndian.AppendUint64(nil, uint64(s))) }

	cases := []struct {
		name   string
		tamper func(db *pebble.DB)
		status audit.Status
		index  int64
	}{
		{"flip a bit in a leaf", func(db *pebble.DB) { flip(db, key("t/l/", 37)) }, audit.LeafMismatch, 37},
		{"flip a bit in a leaf's stored hash", func(db *pebble.DB) { flip(db, key("t/h/", tlog.StoredHashIndex(0, 21))) }, audit.LeafMismatch, 21},
		{"flip a bit in an interior stored hash", func(db *pebble.DB) { flip(db, key("t/h/", tlog.StoredHashIndex(3, 2))) }, audit.HashMismatch, tlog.StoredHashIndex(3, 2)},
		{"flip a bit in a checkpoint", func(db *pebble.DB) { flip(db, key("t/c/", 24)) }, audit.BadSignature, 24},
		{"delete a leaf", func(db *pebble.DB) { del(db, key("t/l/", 12)) }, audit.LeafMismatch, 12},
		{"insert a leaf", func(db *pebble.DB) {
			// Shift leaves 30.. up by one and put a forged one at 30.
			for i := int64(n - 1); i >= 30; i-- {
				set(db, key("t/l/", i+1), get(db, key("t/l/", i)))
			}
			set(db, key("t/l/", 30), leafOf(30, 999).Encode())
			size(db, n+1)
		}, audit.LeafMismatch, 30},
		{"append a leaf beyond the size", func(db *pebble.DB) { set(db, key("t/l/", n), leafOf(n+1, n).Encode()) }, audit.LeafMismatch, n},
		{"swap two leaves", func(db *pebble.DB) {
			a, b := get(db, key("t/l/", 5)), get(db, key("t/l/", 50))
			set(db, key("t/l/", 5), b)
			set(db, key("t/l/", 50), a)
		}, audit.LeafMismatch, 5},
		{"truncate leaves and size", func(db *pebble.DB) {
			for i := int64(60); i < n; i++ {
				del(db, key("t/l/", i))
			}
			for i := tlog.StoredHashIndex(0, 60); i < tlog.StoredHashCount(n); i++ {
				del(db, key("t/h/", i))
			}
			size(db, 60)
		}, audit.Rollback, 64},
		{"truncate leaves only", func(db *pebble.DB) {
			for i := int64(60); i < n; i++ {
				del(db, key("t/l/", i))
			}
		}, audit.LeafMismatch, 60},
		{"edit the size up", func(db *pebble.DB) { size(db, n+3) }, audit.LeafMismatch, n},
		{"edit the size down", func(db *pebble.DB) { size(db, n-3) }, audit.LeafMismatch, n - 3},
		{"drop the unsigned tail", func(db *pebble.DB) {
			// Leaves 60.. and their hashes gone, the size and the newest
			// checkpoint rewound: the projection still says 64.
			for i := int64(60); i < n; i++ {
				del(db, key("t/l/", i))
			}
			for i := tlog.StoredHashIndex(0, 60); i < tlog.StoredHashCount(n); i++ {
				del(db, key("t/h/", i))
			}
			del(db, key("t/c/", 64))
			size(db, 56)
			for i := int64(56); i < 60; i++ {
				del(db, key("t/l/", i))
			}
			for i := tlog.StoredHashIndex(0, 56); i < tlog.StoredHashIndex(0, 60); i++ {
				del(db, key("t/h/", i))
			}
		}, audit.LeafMismatch, 56},
		{"a malformed leaf key", func(db *pebble.DB) { set(db, []byte("t/l/x"), []byte("junk")) }, audit.LeafMismatch, n},
		{"a size of the wrong length", func(db *pebble.DB) { set(db, []byte("t/size"), []byte{1}) }, audit.LeafMismatch, 0},
		{"delete an op's index entry", func(db *pebble.DB) { del(db, key("t/o/"+opID(9)+"/", 9)) }, audit.IndexMismatch, n},
		{"point an op's index at another leaf", func(db *pebble.DB) {
			del(db, key("t/o/"+opID(9)+"/", 9))
			set(db, key("t/o/"+opID(9)+"/", 10), nil)
		}, audit.IndexMismatch, n},
		{"move an index entry to another op", func(db *pebble.DB) {
			del(db, key("t/o/"+opID(9)+"/", 9))
			set(db, key("t/o/"+opID(10)+"/", 9), nil)
		}, audit.IndexMismatch, n},
		{"add an index entry", func(db *pebble.DB) { set(db, key("t/o/"+opID(9)+"/", 10), nil) }, audit.IndexMismatch, n},
		{"replace a checkpoint with one stored under another size", func(db *pebble.DB) {
			set(db, key("t/c/", 20), get(db, key("t/c/", 16)))
		}, audit.BadSignature, 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, k := newLog(t, n, 8)
			require.True(t, verify(t, st, k).OK())
			c.tamper(store.DB(st))
			rep := verify(t, st, k)
			require.Equal(t, c.status, rep.Status, "%+v", rep.Problems)
			require.NotNil(t, rep.Index)
			assert.Equal(t, c.index, *rep.Index, "%+v", rep.Problems)
			if c.name == "flip a bit in a leaf" {
				assert.Empty(t, rep.Root, "no root is claimed for leaves that do not check out")
			}
		})
	}
}

// A history rewritten and signed again with the real key is sound on its
// own; only a checkpoint kept elsewhere shows the fork. A log older than
// such a checkpoint is a rollback.
func TestForkAndRollbackAgainstTrustedCheckpoint(t *testing.T) {
	k := newKey(t)
	live, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer live.Close()
	buildLog(t, live, k, 40, 10)
	trustedNote, err := live.LatestCheckpoint()
	require.NoError(t, err)
	trusted := audit.Trusted{Name: "jetstream", Note: trustedNote}
	require.True(t, verify(t, live, k, trusted).OK())

	// Rewrite: the same number of leaves, one changed, all signed anew.
	forged, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer forged.Close()
	b := forged.NewBatch()
	for j := range 40 {
		l := leafOf(uint64(j+1), j)
		if j == 17 {
			l.Code = "HIDDEN"
		}
		require.NoError(t, b.AppendLeaf(l.Encode(), l.Op))
	}
	b.SetApplied(40)
	_, err = b.Checkpoint(k)
	require.NoError(t, err)
	require.NoError(t, b.Commit(false))
	require.True(t, verify(t, forged, k).OK(), "sound on its own")
	rep := verify(t, forged, k, trusted)
	require.Equal(t, audit.Fork, rep.Status, "%+v", rep.Problems)
	assert.Equal(t, int64(40), *rep.Index)

	// An older copy: 30 leaves of the same history.
	older, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer older.Close()
	buildLog(t, older, k, 30, 10)
	require.True(t, verify(t, older, k).OK())
	rep = verify(t, older, k, trusted)
	require.Equal(t, audit.Rollback, rep.Status, "%+v", rep.Problems)
	assert.Equal(t, int64(40), *rep.Index)

	// Another key's checkpoint is refused, not trusted.
	rep = verify(t, live, k, audit.Trusted{Name: "file", Note: mustSign(t, newKey(t), 40)})
	require.Equal(t, audit.BadSignature, rep.Status)
}

func mustSign(t *testing.T, k *audit.Key, size int64) []byte {
	c, err := k.Sign(size, tlog.Hash{})
	require.NoError(t, err)
	return c.Note
}

func BenchmarkAuditAppend(b *testing.B) {
	st, err := store.Open(b.TempDir())
	require.NoError(b, err)
	defer st.Close()
	k := newKey(b)
	leaves := make([][]byte, 1024)
	for i := range leaves {
		leaves[i] = leafOf(uint64(i+1), i).Encode()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += 1024 {
		bt := st.NewBatch()
		for j := i; j < min(i+1024, b.N); j++ {
			require.NoError(b, bt.AppendLeaf(leaves[j%1024], opID(j/4)))
		}
		_, err := bt.Checkpoint(k)
		require.NoError(b, err)
		require.NoError(b, bt.Commit(false))
	}
}

// BenchmarkVerify verifies a log of 200,000 leaves as `airlock audit
// verify` does: the store opened read-only after it was written. The
// sub-benchmarks take turns, so that a noisy machine's drift falls on
// each alike: run with -count to compare reader counts in one run.
func BenchmarkVerify(b *testing.B) {
	const n = 200_000
	dir := b.TempDir()
	st, err := store.Open(dir)
	require.NoError(b, err)
	k := newKey(b)
	buildLog(b, st, k, n, 1024)
	require.NoError(b, st.Close())
	st, err = store.OpenReadOnly(dir)
	require.NoError(b, err)
	defer st.Close()
	for _, readers := range []int{0, 1, 2, 4, 8} {
		name := fmt.Sprintf("readers=%d", readers)
		if readers == 0 {
			name = "readers=default"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				rep, err := audit.Verify(st, audit.Options{Verifier: k.Verifier, Readers: readers})
				require.NoError(b, err)
				require.True(b, rep.OK(), "%v", rep.Problems)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "leaves/s")
		})
	}
}

// sequential is a store as a Source whose stored hashes can only be read
// from the first: verify walks it leaf by leaf, as it did before it read
// in stripes.
type sequential struct{ st *store.Store }

func (s sequential) LogSize() (int64, error) { return s.st.LogSize() }
func (s sequential) Leaves(from int64, fn func(int64, []byte) error) error {
	return s.st.Leaves(from, fn)
}
func (s sequential) HashCursor() (audit.HashCursor, error)      { return s.st.HashCursor() }
func (s sequential) Checkpoints() ([]int64, [][]byte, error)    { return s.st.Checkpoints() }
func (s sequential) Applied() (uint64, error)                   { return s.st.Applied() }
func (s sequential) OpIndex(fn func([]byte, int64) error) error { return s.st.OpIndex(fn) }

// leavesOnly is a store as a Source with no stored hashes: verify
// recomputes every one, as it does reading a server's answers.
type leavesOnly struct{ sequential }

func (leavesOnly) HashCursor() (audit.HashCursor, error) { return nil, audit.ErrNoStoredHashes }

// A log of several stripes, checkpoints within them, tampered with in
// whole stripes, at their edges and above their level: verify, reading in
// stripes, reports exactly what it reports walking leaf by leaf.
func TestStripedVerifyReportsAsLeafByLeaf(t *testing.T) {
	const n = 5*1024 + 300
	get := func(db *pebble.DB, k []byte) []byte {
		v, closer, err := db.Get(k)
		require.NoError(t, err)
		defer closer.Close()
		return append([]byte{}, v...)
	}
	set := func(db *pebble.DB, k, v []byte) { require.NoError(t, db.Set(k, v, pebble.Sync)) }
	flip := func(db *pebble.DB, k []byte) {
		b := get(db, k)
		b[len(b)/2] ^= 0x01
		set(db, k, b)
	}
	del := func(db *pebble.DB, k []byte) { require.NoError(t, db.Delete(k, pebble.Sync)) }
	cases := []struct {
		name   string
		tamper func(db *pebble.DB)
		status audit.Status
	}{
		{"untouched", func(*pebble.DB) {}, audit.StatusOK},
		{"flip a leaf in a whole stripe", func(db *pebble.DB) { flip(db, key("t/l/", 2500)) }, audit.LeafMismatch},
		{"flip a stripe's first leaf", func(db *pebble.DB) { flip(db, key("t/l/", 3072)) }, audit.LeafMismatch},
		{"flip a stripe's last leaf", func(db *pebble.DB) { flip(db, key("t/l/", 2047)) }, audit.LeafMismatch},
		{"flip a leaf's stored hash", func(db *pebble.DB) { flip(db, key("t/h/", tlog.StoredHashIndex(0, 3000))) }, audit.LeafMismatch},
		{"flip an interior stored hash", func(db *pebble.DB) { flip(db, key("t/h/", tlog.StoredHashIndex(3, 300))) }, audit.HashMismatch},
		{"flip a stripe's own subtree hash", func(db *pebble.DB) { flip(db, key("t/h/", tlog.StoredHashIndex(10, 2))) }, audit.HashMismatch},
		{"flip a hash above the stripes", func(db *pebble.DB) { flip(db, key("t/h/", tlog.StoredHashIndex(11, 0))) }, audit.HashMismatch},
		{"flip a hash two levels above", func(db *pebble.DB) { flip(db, key("t/h/", tlog.StoredHashIndex(12, 0))) }, audit.HashMismatch},
		{"delete a hash above the stripes", func(db *pebble.DB) { del(db, key("t/h/", tlog.StoredHashIndex(11, 1))) }, audit.HashMismatch},
		{"delete an interior stored hash", func(db *pebble.DB) { del(db, key("t/h/", tlog.StoredHashIndex(2, 700))) }, audit.HashMismatch},
		{"delete a leaf", func(db *pebble.DB) { del(db, key("t/l/", 3100)) }, audit.LeafMismatch},
		{"delete a stripe's first leaf", func(db *pebble.DB) { del(db, key("t/l/", 4096)) }, audit.LeafMismatch},
		{"delete a whole stripe's leaves", func(db *pebble.DB) {
			for i := int64(1024); i < 2048; i++ {
				del(db, key("t/l/", i))
			}
		}, audit.LeafMismatch},
		{"swap leaves across stripes", func(db *pebble.DB) {
			a, b := get(db, key("t/l/", 1500)), get(db, key("t/l/", 4000))
			set(db, key("t/l/", 1500), b)
			set(db, key("t/l/", 4000), a)
		}, audit.LeafMismatch},
		{"a leaf of a later sequence", func(db *pebble.DB) {
			set(db, key("t/l/", 2222), leafOf(2224, 2222).Encode())
		}, audit.LeafMismatch},
		{"truncate leaves at a stripe's edge", func(db *pebble.DB) {
			for i := int64(4096); i < n; i++ {
				del(db, key("t/l/", i))
			}
		}, audit.LeafMismatch},
		{"append a leaf beyond the size", func(db *pebble.DB) { set(db, key("t/l/", n), leafOf(n+1, n).Encode()) }, audit.LeafMismatch},
		{"append a stored hash beyond the size", func(db *pebble.DB) {
			set(db, key("t/h/", tlog.StoredHashCount(n)), make([]byte, 32))
		}, audit.HashMismatch},
		{"a key that is not a leaf's between two stripes", func(db *pebble.DB) {
			set(db, append(key("t/l/", 1023), 0), []byte("junk"))
		}, audit.LeafMismatch},
		{"a key that is not a stored hash's between two stripes", func(db *pebble.DB) {
			set(db, append(key("t/h/", tlog.StoredHashIndex(0, 2048)-1), 0), make([]byte, 32))
		}, audit.LeafMismatch},
		{"a stored hash of the wrong length above the stripes", func(db *pebble.DB) {
			set(db, key("t/h/", tlog.StoredHashIndex(11, 0)), make([]byte, 31))
		}, audit.HashMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, k := newLog(t, n, 777) // checkpoints within stripes
			c.tamper(store.DB(st))
			striped := verify(t, st, k)
			rep, err := audit.Verify(sequential{st}, audit.Options{Verifier: k.Verifier})
			require.NoError(t, err)
			assert.Equal(t, c.status, striped.Status, "%+v", striped.Problems)
			assert.Equal(t, rep, striped)
			// A source with no stored hashes (as a server's answers are)
			// finds the leaves sound when only stored hashes were
			// touched, and not when a leaf was (by the leaf itself or by
			// the checkpoints' roots).
			hashless, err := audit.Verify(leavesOnly{sequential{st}}, audit.Options{Verifier: k.Verifier})
			require.NoError(t, err)
			hashesOnly := c.status == audit.StatusOK || strings.Contains(c.name, "hash")
			assert.Equal(t, hashesOnly, hashless.OK(), "%+v", hashless.Problems)
		})
	}
}

// CheckTrusted after a walk without trusted checkpoints reports what a
// walk with them reports: a start walks the log while JetStream's
// checkpoints are still being fetched.
func TestCheckTrustedAfterTheWalkReportsAsTheWalk(t *testing.T) {
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	k := newKey(t)
	buildLog(t, st, k, 5000, 1000)
	signed := func(size int64) audit.Trusted {
		root, err := tlog.TreeHash(size, st)
		require.NoError(t, err)
		if size == 0 {
			root = audit.EmptyRoot
		}
		c, err := k.Sign(size, root)
		require.NoError(t, err)
		return audit.Trusted{Name: fmt.Sprintf("good at %d", size), Note: c.Note}
	}
	cases := map[string][]audit.Trusted{
		"none":          nil,
		"within":        {signed(2500)},
		"at the end":    {signed(5000)},
		"empty":         {signed(0)},
		"beyond":        {{Name: "beyond", Note: mustSign(t, k, 6000)}},
		"fork":          {{Name: "fork", Note: mustSign(t, k, 3000)}},
		"another key":   {{Name: "another key", Note: mustSign(t, newKey(t), 3000)}},
		"not a note":    {{Name: "garbage", Note: []byte("not a checkpoint\n")}},
		"several, bad":  {signed(2500), {Name: "beyond", Note: mustSign(t, k, 7000)}, {Name: "fork", Note: mustSign(t, k, 1234)}},
		"several, good": {signed(1), signed(4999), signed(5000)},
	}
	for name, trusted := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := audit.Verify(st, audit.Options{Verifier: k.Verifier, Trusted: trusted})
			require.NoError(t, err)
			got, err := audit.Verify(st, audit.Options{Verifier: k.Verifier})
			require.NoError(t, err)
			audit.CheckTrusted(st, got, audit.Options{Verifier: k.Verifier}, trusted)
			// A walk that had a trusted checkpoint it could not open
			// reports no root; checked after the walk, the root stands.
			if want.Root == "" && want.Status == audit.BadSignature {
				want.Root = got.Root
			}
			assert.Equal(t, want.Status, got.Status)
			assert.Equal(t, want.Problems, got.Problems)
			assert.Equal(t, want.Anchors, got.Anchors)
			assert.Equal(t, want, got)
		})
	}
	// A stored hash that can no longer be read is reported, not an error.
	got, err := audit.Verify(st, audit.Options{Verifier: k.Verifier})
	require.NoError(t, err)
	broken := tlog.HashReaderFunc(func([]int64) ([]tlog.Hash, error) { return nil, audit.ErrUnreadable })
	audit.CheckTrusted(broken, got, audit.Options{Verifier: k.Verifier}, []audit.Trusted{signed(2500)})
	assert.Equal(t, audit.Corrupt, got.Status)
	assert.Equal(t, []string{"the log's own checkpoints (newest at 5000)", "good at 2500 (at 2500)"}, got.Anchors)
}
