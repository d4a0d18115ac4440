package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/events"
	"github.com/cockroachdb/pebble/v2"
)

// The count of ops in each state is kept under m/n/<state>, written in the
// batch that moves ops between states, so that it is exact whenever the
// projection is. m/counted holds the applied sequence the counts go with,
// written in every batch that moves m/applied: when the two differ at open
// (a store written before counts were kept, or by an older binary after a
// downgrade) the state index is counted again.
var keyCounted = []byte("m/counted")

func countKey(st events.State) []byte { return []byte("m/n/" + string(st)) }

// Counts returns the number of ops in each state, every state present. The
// caller owns the map. It is safe to call concurrently with a commit, and
// reflects the last commit.
func (s *Store) Counts() map[events.State]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[events.State]int64, len(events.AllStates))
	for _, st := range events.AllStates {
		out[st] = s.counts[st]
	}
	return out
}

// loadCounts reads the counts, counting the state index once when the
// store has none yet (and, unless read-only, storing what it found).
func (s *Store) loadCounts(readOnly bool) error {
	s.counts = make(map[events.State]int64, len(events.AllStates))
	applied, err := s.Applied()
	if err != nil {
		return err
	}
	v, closer, err := s.db.Get(keyCounted)
	switch {
	case err == nil:
		current := len(v) == 8 && binary.BigEndian.Uint64(v) == applied
		closer.Close()
		if current {
			for _, st := range events.AllStates {
				n, err := s.uint64Key(countKey(st), "op count")
				if err != nil {
					return err
				}
				s.counts[st] = int64(n)
			}
			return nil
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return err
	}
	for _, st := range events.AllStates {
		prefix := []byte("s/" + string(st) + "/")
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return err
		}
		var n int64
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			return err
		}
		s.counts[st] = n
	}
	if readOnly {
		return nil
	}
	pb := s.db.NewBatch()
	defer pb.Close()
	writeCounts(pb, s.counts, nil)
	if err := pb.Set(keyCounted, seqBytes(applied), nil); err != nil {
		return err
	}
	if err := pb.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: count ops: %w", err)
	}
	return nil
}

// countDelta is what a batch changes in the counts.
type countDelta map[events.State]int64

func (d countDelta) move(from, to events.State) {
	if from == to {
		return
	}
	if from != events.StateNew {
		d[from]--
	}
	d[to]++
}

// writeCounts writes base+delta for the states delta names, or every state
// of base when delta is nil, and reports whether every count stayed at or
// above zero. A count that would go below is written as zero: the counts
// are then wrong (the caller makes the next open count again), which must
// not stop the projection they describe.
func writeCounts(pb writer, base map[events.State]int64, delta countDelta) bool {
	ok := true
	for _, st := range events.AllStates {
		d, named := delta[st]
		if delta != nil && !named {
			continue
		}
		n := base[st] + d
		if n < 0 {
			n, ok = 0, false
		}
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], uint64(n))
		_ = pb.Set(countKey(st), v[:], nil) // a batch Set fails only when closed
	}
	return ok
}
