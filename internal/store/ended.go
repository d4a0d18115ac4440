package store

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/airlock-dev/airlock/events"
	"github.com/cockroachdb/pebble/v2"
)

// ended is a Bloom filter of the ids of the ops the store holds as ended
// (in a terminal state), so that the question asked of every new op, "is
// this a retry of an op that ended and left the ops stream?" (ADR 0026),
// is answered in memory: a lookup of an op the store does not hold costs
// a Pebble read of tens of µs (docs/performance.md). It answers "maybe"
// until it has read every ended op the store held at its opening
// (indexEnded); Commit adds every op that ends.
type ended struct {
	seed  maphash.Seed
	ready atomic.Bool
	mu    sync.RWMutex
	bits  []uint64
}

// endedBits is the filter's size: 2^26 bits (8 MB), about 1% false
// positives with endedHashes hashes at 7 million ended ops, more beyond;
// a false positive costs one read.
const (
	endedBits   = 1 << 26
	endedHashes = 7
)

func newEnded() *ended {
	return &ended{seed: maphash.MakeSeed(), bits: make([]uint64, endedBits/64)}
}

func (e *ended) hashes(id string) (uint64, uint64) {
	h := maphash.String(e.seed, id)
	return h, h>>33 | h<<31 | 1
}

func (e *ended) add(id string) {
	h1, h2 := e.hashes(id)
	e.mu.Lock()
	for i := range uint64(endedHashes) {
		b := (h1 + i*h2) % endedBits
		e.bits[b/64] |= 1 << (b % 64)
	}
	e.mu.Unlock()
}

func (e *ended) maybe(id string) bool {
	if !e.ready.Load() {
		return true
	}
	h1, h2 := e.hashes(id)
	e.mu.RLock()
	defer e.mu.RUnlock()
	for i := range uint64(endedHashes) {
		b := (h1 + i*h2) % endedBits
		if e.bits[b/64]&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

// MaybeEnded reports whether the store may hold op id as ended: false
// means it holds no ended op id (it may hold it as not ended).
func (s *Store) MaybeEnded(id string) bool { return s.ended.maybe(id) }

// indexEnded reads the ids of every ended op the store holds into the
// filter, from the state index (keys only), and then lets it answer.
func (s *Store) indexEnded(ctx context.Context) error {
	for _, st := range []events.State{events.StateCompleted, events.StateFailed, events.StateDenied, events.StateExpired, events.StateAmbiguous} {
		prefix := []byte("s/" + string(st) + "/")
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok && ctx.Err() == nil; ok = it.Next() {
			if k := it.Key(); len(k) > len(prefix)+9 {
				s.ended.add(string(k[len(prefix)+9:]))
			}
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.ended.ready.Store(true)
	return nil
}
