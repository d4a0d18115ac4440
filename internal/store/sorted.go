package store

import (
	"bytes"
	"cmp"
	"slices"
	"sync"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
)

// writer is what the store's write paths need of a Pebble batch. A sorted
// writer keeps the key and value slices it is given until the batch is
// built: callers must not reuse them.
type writer interface {
	Set(key, value []byte, _ *pebble.WriteOptions) error
	Delete(key []byte, _ *pebble.WriteOptions) error
}

// sorted collects a batch's writes and hands them to Pebble in key order.
// Pebble inserts a batch into its memtable (a skiplist) one key at a time,
// starting each search from where the previous key went: keys in order
// land next to each other and skip most of the search, where the order the
// projector produces them in (an op, its index keys, its leaf, its hashes,
// the next op) makes every insert a search from the top of a list of
// millions of keys. In a profile of `airlock bench`, sorting took the
// skiplist searches from 5.3% to 3.4% of all CPU.
//
// A key written twice keeps its writes in order (ties are broken by the
// order of the writes), so the last one wins, as in a plain batch.
type sorted struct {
	w    []sortedWrite
	size int
}

type sortedWrite struct {
	key, value []byte
	n          int // the write's place in the batch
	del        bool
}

var _ writer = (*sorted)(nil)

func (s *sorted) Set(key, value []byte, _ *pebble.WriteOptions) error {
	s.w = append(s.w, sortedWrite{key: key, value: value, n: len(s.w)})
	s.size += len(key) + len(value) + 16
	return nil
}

func (s *sorted) Delete(key []byte, _ *pebble.WriteOptions) error {
	s.w = append(s.w, sortedWrite{key: key, del: true, n: len(s.w)})
	s.size += len(key) + 16
	return nil
}

// batch returns a Pebble batch holding the writes in key order. The writes'
// keys and values are copied into it.
//
// reuse, when not nil, is a batch an earlier commit wrote (and no one
// else holds): it is reset and filled instead of a new one.
func (s *sorted) batch(db *pebble.DB, reuse *pebble.Batch) (*pebble.Batch, error) {
	slices.SortFunc(s.w, func(a, b sortedWrite) int {
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.n, b.n)
	})
	pb := reuse
	if pb == nil {
		pb = db.NewBatchWithSize(s.size, pebble.WithMaxRetainedSizeBytes(maxScratchBytes))
	} else {
		pb.Reset()
	}
	for _, w := range s.w {
		var err error
		if w.del {
			err = pb.Delete(w.key, nil)
		} else {
			err = pb.Set(w.key, w.value, nil)
		}
		if err != nil {
			pb.Close()
			return nil, err
		}
	}
	return pb, nil
}

// maxScratchBytes bounds the buffers a store keeps from one commit for
// the next (commitScratch): a commit larger than that allocates its own.
const maxScratchBytes = 4 << 20

// commitScratch is what a store's commits reuse, one commit at a time:
// the list of writes, the buffer of op records and the Pebble batch.
type commitScratch struct {
	mu    sync.Mutex
	w     []sortedWrite
	recs  []byte
	batch *pebble.Batch
}

// keep keeps w for the next commit, its keys and values dropped, unless
// it has outgrown the bound.
func (sc *commitScratch) keep(w []sortedWrite) {
	if cap(w)*int(unsafe.Sizeof(sortedWrite{})) > maxScratchBytes {
		sc.w = nil
		return
	}
	clear(w)
	sc.w = w[:0]
}

// keepBuf is b emptied for reuse, or nil when it has outgrown the bound.
func keepBuf(b []byte) []byte {
	if cap(b) > maxScratchBytes {
		return nil
	}
	return b[:0]
}
