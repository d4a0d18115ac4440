package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/mod/sumdb/tlog"
)

// The audit log's keys:
//
//	t/size               leaves in the log (8 bytes, big endian)
//	t/l/<index>          leaf <index> (audit.Leaf encoding)
//	t/h/<stored index>   tlog stored hash (32 bytes)
//	t/c/<size>           the signed checkpoint of the tree of <size> leaves
//	t/o/<op id>/<index>  the leaves of an op (no value)
var (
	prefixOpLeaf     = []byte("t/o/")
	keyLogSize       = []byte("t/size")
	prefixLeaf       = []byte("t/l/")
	prefixHash       = []byte("t/h/")
	prefixCheckpoint = []byte("t/c/")
)

// MaxCheckpoints bounds the checkpoints the store keeps: writing one more
// deletes the oldest. The tree is unaffected, and a checkpoint kept
// elsewhere still verifies against it.
const MaxCheckpoints = 10_000

func indexKey(prefix []byte, i int64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, prefix...), uint64(i))
}

// LogSize is the number of leaves in the audit log, as recorded.
func (s *Store) LogSize() (int64, error) {
	n, err := s.uint64Key(keyLogSize, "log size")
	if err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return 0, fmt.Errorf("%w: %w", audit.ErrCorrupt, err)
	}
	return int64(n), err
}

// ReadHashes reads stored hashes (tlog.HashReader).
func (s *Store) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, idx := range indexes {
		v, closer, err := s.db.Get(indexKey(prefixHash, idx))
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, fmt.Errorf("store: stored hash %d missing", idx)
		}
		if err != nil {
			return nil, corrupt(err)
		}
		n := copy(out[i][:], v)
		closer.Close()
		if n != tlog.HashSize || len(v) != tlog.HashSize {
			return nil, fmt.Errorf("store: stored hash %d is %d bytes", idx, len(v))
		}
	}
	return out, nil
}

// Leaf returns leaf i of the audit log.
func (s *Store) Leaf(i int64) ([]byte, error) {
	v, closer, err := s.db.Get(indexKey(prefixLeaf, i))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("%w: leaf %d", ErrNotFound, i)
	}
	if err != nil {
		return nil, corrupt(err)
	}
	defer closer.Close()
	return append([]byte{}, v...), nil
}

// Leaves calls fn with each stored leaf from index from on, in index order,
// as stored: a verifier sees any gap. fn must not keep leaf.
func (s *Store) Leaves(from int64, fn func(index int64, leaf []byte) error) error {
	return s.scan(prefixLeaf, from, fn)
}

// LeavesBetween calls fn with each stored leaf of index from to to
// (excluded), and fails on any key in that range that is not a leaf's
// (audit.LeafRangeSource).
func (s *Store) LeavesBetween(from, to int64, fn func(index int64, leaf []byte) error) error {
	return s.scanTo(prefixLeaf, from, indexKey(prefixLeaf, to), fn)
}

// Checkpoints returns every stored checkpoint note, keyed by the size its
// key names, in size order.
func (s *Store) Checkpoints() (sizes []int64, notes [][]byte, err error) {
	return s.CheckpointsFrom(0, -1)
}

// CheckpointsFrom returns up to limit stored checkpoints of size from on.
func (s *Store) CheckpointsFrom(from int64, limit int) (sizes []int64, notes [][]byte, err error) {
	err = s.scan(prefixCheckpoint, from, func(size int64, v []byte) error {
		if len(sizes) == limit {
			return errFull
		}
		sizes = append(sizes, size)
		notes = append(notes, append([]byte{}, v...))
		return nil
	})
	if errors.Is(err, errFull) {
		err = nil
	}
	return sizes, notes, err
}

var errFull = errors.New("full")

// LatestCheckpoint is the newest stored checkpoint note, nil if none.
func (s *Store) LatestCheckpoint() ([]byte, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefixCheckpoint, UpperBound: prefixEnd(prefixCheckpoint)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if !it.Last() {
		return nil, corrupt(it.Error())
	}
	return append([]byte{}, it.Value()...), nil
}

func (s *Store) scan(prefix []byte, from int64, fn func(int64, []byte) error) error {
	return s.scanTo(prefix, from, prefixEnd(prefix), fn)
}

func (s *Store) scanTo(prefix []byte, from int64, upper []byte, fn func(int64, []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: indexKey(prefix, from), UpperBound: upper})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(prefix):]
		if len(k) != 8 {
			return fmt.Errorf("%w: key %q is malformed", audit.ErrCorrupt, it.Key())
		}
		if err := fn(int64(binary.BigEndian.Uint64(k)), it.Value()); err != nil {
			return err
		}
	}
	return corrupt(it.Error())
}

// appender is the store's audit tree writer, created on first use from
// the recorded size.
func (s *Store) appender() (*audit.Appender, error) {
	if s.app != nil {
		return s.app, nil
	}
	size, err := s.LogSize()
	if err != nil {
		return nil, err
	}
	s.app = audit.NewAppender(size, s)
	return s.app, nil
}

type pendingLeaf struct {
	index  int64
	op     string
	data   []byte
	hashes []tlog.Hash
}

// OpLeaves returns the indexes of an op's leaves, in order.
func (s *Store) OpLeaves(op string) ([]int64, error) {
	prefix := append(append([]byte{}, prefixOpLeaf...), op+"/"...)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []int64
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(prefix):]
		if len(k) != 8 {
			return nil, fmt.Errorf("store: audit key %q is malformed", it.Key())
		}
		out = append(out, int64(binary.BigEndian.Uint64(k)))
	}
	return out, corrupt(it.Error())
}

// AppendLeaf adds a leaf to the audit log in this batch: the leaf, its
// stored hashes and the new size are written with the state it describes.
// op, if not "", indexes the leaf under its op.
func (b *Batch) AppendLeaf(leaf []byte, op string) error {
	if len(leaf) > audit.MaxLeafBytes {
		return fmt.Errorf("store: leaf of %d bytes, limit %d", len(leaf), audit.MaxLeafBytes)
	}
	app, err := b.s.appender()
	if err != nil {
		return err
	}
	b.touched = true
	i, hashes, err := app.Append(leaf)
	if err != nil {
		return fmt.Errorf("store: append leaf: %w", err)
	}
	b.leaves = append(b.leaves, pendingLeaf{index: i, data: leaf, hashes: hashes, op: op})
	return nil
}

// LogSize is the log's size with this batch's leaves.
func (b *Batch) LogSize() (int64, error) {
	app, err := b.s.appender()
	if err != nil {
		return 0, err
	}
	return app.Size(), nil
}

// Checkpoint signs a checkpoint of the log with this batch's leaves and
// writes it in the batch.
func (b *Batch) Checkpoint(k *audit.Key) (*audit.Checkpoint, error) {
	app, err := b.s.appender()
	if err != nil {
		return nil, err
	}
	b.touched = true
	root, err := app.TreeHash()
	if err != nil {
		return nil, fmt.Errorf("store: tree hash: %w", err)
	}
	c, err := k.Sign(app.Size(), root)
	if err != nil {
		return nil, err
	}
	b.checkpoint = c
	return c, nil
}

// writeLog adds the batch's audit writes to pb.
func (b *Batch) writeLog(pb writer) error {
	for _, l := range b.leaves {
		if err := pb.Set(indexKey(prefixLeaf, l.index), l.data, nil); err != nil {
			return err
		}
		if l.op != "" {
			k := indexKey(append(append([]byte{}, prefixOpLeaf...), l.op+"/"...), l.index)
			if err := pb.Set(k, nil, nil); err != nil {
				return err
			}
		}
		first := tlog.StoredHashIndex(0, l.index)
		for j, h := range l.hashes {
			if err := pb.Set(indexKey(prefixHash, first+int64(j)), h[:], nil); err != nil {
				return err
			}
		}
	}
	if len(b.leaves) > 0 {
		last := b.leaves[len(b.leaves)-1].index
		if err := pb.Set(keyLogSize, binary.BigEndian.AppendUint64(nil, uint64(last+1)), nil); err != nil {
			return err
		}
	}
	if c := b.checkpoint; c != nil {
		if err := pb.Set(indexKey(prefixCheckpoint, c.Size), c.Note, nil); err != nil {
			return err
		}
		var err error
		b.checkpointDelta, err = b.s.pruneCheckpoints(pb, b.s.maxCheckpoints, c.Size)
		return err
	}
	return nil
}

// pruneCheckpoints makes room for the checkpoint of size that pb adds:
// it deletes the oldest stored ones beyond max - 1 and returns by how many
// the count of stored checkpoints changes. The count is read once, then
// kept (Batch.Commit applies the change), so a checkpoint costs no scan.
func (s *Store) pruneCheckpoints(pb writer, max int, size int64) (delta int, err error) {
	if s.checkpoints < 0 {
		n := 0
		if err := s.scan(prefixCheckpoint, 0, func(int64, []byte) error { n++; return nil }); err != nil {
			return 0, err
		}
		s.checkpoints = n
	}
	if _, closer, err := s.db.Get(indexKey(prefixCheckpoint, size)); err == nil {
		closer.Close()
		return 0, nil // signed again at the same size: replaced, not added
	}
	excess := s.checkpoints + 1 - max
	if excess <= 0 {
		return 1, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefixCheckpoint, UpperBound: prefixEnd(prefixCheckpoint)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	deleted := 0
	for ok := it.First(); ok && deleted < excess; ok = it.Next() {
		if err := pb.Delete(append([]byte{}, it.Key()...), nil); err != nil {
			return 0, err
		}
		deleted++
	}
	return 1 - deleted, corrupt(it.Error())
}

// HashCursor reads the stored hashes in index order, as stored.
func (s *Store) HashCursor() (audit.HashCursor, error) { return s.HashCursorFrom(0) }

// HashCursorFrom reads the stored hashes in index order from index from
// on (audit.HashCursorFromSource: verify's readers each check their part).
func (s *Store) HashCursorFrom(from int64) (audit.HashCursor, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: indexKey(prefixHash, from), UpperBound: prefixEnd(prefixHash)})
	if err != nil {
		return nil, err
	}
	return &hashCursor{it: it}, nil
}

type hashCursor struct {
	it      *pebble.Iterator
	started bool
	err     error
}

func (c *hashCursor) Next() (int64, []byte, bool) {
	var ok bool
	if !c.started {
		c.started, ok = true, c.it.First()
	} else {
		ok = c.it.Next()
	}
	if !ok {
		return 0, nil, false
	}
	k := c.it.Key()[len(prefixHash):]
	if len(k) != 8 {
		c.err = fmt.Errorf("%w: key %q is malformed", audit.ErrCorrupt, c.it.Key())
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(k)), c.it.Value(), true
}

func (c *hashCursor) Err() error {
	if c.err != nil {
		return c.err
	}
	return corrupt(c.it.Error())
}

func (c *hashCursor) Close() error { return c.it.Close() }

// OpIndex calls fn with every entry of the op index (audit.OpIndexSource).
func (s *Store) OpIndex(fn func(op []byte, index int64) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefixOpLeaf, UpperBound: prefixEnd(prefixOpLeaf)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(prefixOpLeaf):]
		if len(k) < 10 || k[len(k)-9] != '/' {
			return fmt.Errorf("%w: key %q is malformed", audit.ErrCorrupt, it.Key())
		}
		if err := fn(k[:len(k)-9], int64(binary.BigEndian.Uint64(k[len(k)-8:]))); err != nil {
			return err
		}
	}
	return corrupt(it.Error())
}
