package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/cockroachdb/pebble/v2"
)

// The scrub index lists the ops whose request message, the only copy of
// their argument plaintext, is to be erased from AIRLOCK_REQUESTS:
//
//	x/<seq>/<op id>         request seq to erase (8 bytes, big endian),
//	                        a ninth byte 1 for a held op, then when the
//	                        op ended (unix ms, 8 bytes; absent in entries
//	                        written before it was); <seq> is the op's
//	                        terminal event's (its first event's in
//	                        stores written before it was)
//	m/scrub-indexed         present once IndexScrubs has indexed the
//	                        terminal ops stored before the index existed
//
// Commit writes an op's x/ key in the same Pebble batch as the transition
// that makes the op terminal, so no terminal op is ever without one. The
// scrubber erases the message and then deletes the key: a crash in
// between leaves the key, and the erase is done again (it is idempotent).
// Keys by terminal sequence come in the order the projector applies the
// stream, so a scrubber that remembers where it got to (PendingScrubs'
// after) never walks again over the keys it deleted.

const scrubPrefix = "x/"

var keyScrubIndexed = []byte("m/scrub-indexed")

// markScrub is Commit's hook: it indexes the op of e for scrubbing when
// this batch moves it into a terminal state.
func markScrub(pb writer, e *entry) error {
	if e.from.Terminal() || !e.op.State.Terminal() || e.op.RequestSeq == 0 {
		return nil
	}
	return pb.Set(scrubKey(e.op), scrubValue(e.op), nil)
}

// scrubKey is an op's key in the scrub index: by the sequence of its
// newest event, the terminal one when the op is indexed.
func scrubKey(op *events.Op) []byte {
	k := make([]byte, 0, len(scrubPrefix)+9+len(op.ID))
	k = append(k, scrubPrefix...)
	k = binary.BigEndian.AppendUint64(k, op.Version)
	k = append(k, '/')
	return append(k, op.ID...)
}

func seqBytes(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

// scrubValue is a scrub entry's value: the request's sequence, a ninth
// byte 1 when the op was held (its request was moved to AIRLOCK_HELD,
// which the scrub erases too), and when the op ended.
func scrubValue(op *events.Op) []byte {
	v := seqBytes(op.RequestSeq)
	if op.HoldID != "" {
		v = append(v, 1)
	}
	return binary.BigEndian.AppendUint64(v, uint64(op.UpdatedAt.UnixMilli()))
}

// Scrub is one entry of the scrub index: the terminal op OpID, whose
// request message RequestSeq in AIRLOCK_REQUESTS is to be erased.
type Scrub struct {
	OpID       string
	RequestSeq uint64
	// Held: the op was held, and its request copied to AIRLOCK_HELD.
	Held bool
	// Ended is when the op ended; zero for entries of stores written
	// before the index recorded it.
	Ended time.Time
	key   []byte
}

// Key is the entry's key in the index, for PendingScrubs' after.
func (sc Scrub) Key() []byte { return sc.key }

// PendingScrubs returns up to limit entries of the scrub index, in the
// order the ops ended, from the first key after after (nil: from the
// start).
func (s *Store) PendingScrubs(after []byte, limit int) ([]Scrub, error) {
	prefix := []byte(scrubPrefix)
	lower := prefix
	if bytes.Compare(after, prefix) >= 0 {
		lower = append(append([]byte(nil), after...), 0)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Scrub
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) < len(prefix)+9 || (len(v) != 8 && len(v) != 9 && len(v) != 16 && len(v) != 17) {
			return nil, fmt.Errorf("store: malformed scrub entry %q", k)
		}
		sc := Scrub{
			OpID:       string(k[len(prefix)+9:]),
			RequestSeq: binary.BigEndian.Uint64(v),
			Held:       len(v)%8 == 1 && v[8] == 1,
			key:        append([]byte(nil), k...),
		}
		if len(v) >= 16 {
			sc.Ended = time.UnixMilli(int64(binary.BigEndian.Uint64(v[len(v)-8:])))
		}
		out = append(out, sc)
	}
	return out, it.Error()
}

// LiveRequestFloor is the lowest request sequence of an op the store
// holds as ready or executing, whose request an executor may still read;
// math.MaxUint64 when there is none.
func (s *Store) LiveRequestFloor() (uint64, error) {
	floor := uint64(math.MaxUint64)
	for _, st := range []events.State{events.StateReady, events.StateExecuting} {
		prefix := []byte("s/" + string(st) + "/")
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return 0, err
		}
		for ok := it.First(); ok; ok = it.Next() {
			k := it.Key()
			if len(k) < len(prefix)+9 {
				it.Close()
				return 0, fmt.Errorf("store: malformed state key %q", k)
			}
			seq, err := s.requestSeq(string(k[len(prefix)+9:]))
			if err != nil {
				it.Close()
				return 0, err
			}
			if seq != 0 && seq < floor {
				floor = seq
			}
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return 0, err
		}
	}
	return floor, nil
}

// requestSeq is op id's request sequence: from the cache of live ops,
// else from the store; 0 for an op it does not hold.
func (s *Store) requestSeq(id string) (uint64, error) {
	s.mu.Lock()
	op, ok := s.live[id]
	s.mu.Unlock()
	if ok {
		return op.RequestSeq, nil
	}
	stored, err := s.Op(id)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return stored.RequestSeq, nil
}

// Scrubbed removes done entries from the scrub index. The removal need not
// be durable: an entry that comes back after a crash is erased again, and
// finds nothing to erase.
func (s *Store) Scrubbed(done ...Scrub) error {
	if len(done) == 0 {
		return nil
	}
	pb := s.db.NewBatch()
	defer pb.Close()
	for _, d := range done {
		if err := pb.Delete(d.key, nil); err != nil {
			return err
		}
	}
	return pb.Commit(pebble.NoSync)
}

// IndexScrubs brings a store written before the scrub index existed up to
// date, once: every terminal op gets its x/ key, and an op whose stored
// value still holds a result (kept by earlier versions) is written again
// without it, after which the op range is compacted so that the old values
// leave the store's tables. It returns how many ops it indexed; later
// calls do nothing.
func (s *Store) IndexScrubs(ctx context.Context) (int, error) {
	if _, closer, err := s.db.Get(keyScrubIndexed); err == nil {
		closer.Close()
		return 0, nil
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return 0, err
	}
	n, rewritten := 0, 0
	for _, st := range events.AllStates {
		if !st.Terminal() {
			continue
		}
		k, r, err := s.indexState(st)
		n, rewritten = n+k, rewritten+r
		if err != nil {
			return n, err
		}
	}
	if rewritten > 0 {
		prefix := []byte("o/")
		if err := s.db.Compact(ctx, prefix, prefixEnd(prefix), false); err != nil {
			return n, fmt.Errorf("store: compact rewritten ops: %w", err)
		}
	}
	return n, s.db.Set(keyScrubIndexed, nil, pebble.Sync)
}

// indexState indexes the ops in terminal state st for IndexScrubs.
func (s *Store) indexState(st events.State) (indexed, rewritten int, err error) {
	prefix := []byte("s/" + string(st) + "/")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, 0, err
	}
	defer it.Close()
	pb := s.db.NewBatch()
	defer pb.Close()
	for ok := it.First(); ok; ok = it.Next() {
		id := string(it.Key()[len(prefix)+9:])
		raw, closer, err := s.db.Get(opKey(id))
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return indexed, rewritten, err
		}
		op := new(events.Op)
		var stale bool
		if len(raw) > 0 && raw[0] == '{' {
			// Written as JSON by an earlier version, which may have kept
			// the op's result in it.
			err = json.Unmarshal(raw, op)
			stale = bytes.Contains(raw, []byte(`"result":`))
		} else {
			err = decodeOpRecord(raw, op)
		}
		closer.Close()
		if err != nil {
			return indexed, rewritten, fmt.Errorf("store: op %s: %w", id, err)
		}
		if stale {
			// The struct has no result: writing the op back drops it.
			v, err := appendOpRecord(nil, op)
			if err == nil {
				err = pb.Set(opKey(id), v, nil)
			}
			if err != nil {
				return indexed, rewritten, err
			}
			rewritten++
		}
		if op.RequestSeq != 0 {
			if err := pb.Set(scrubKey(op), scrubValue(op), nil); err != nil {
				return indexed, rewritten, err
			}
			indexed++
		}
	}
	if err := it.Error(); err != nil {
		return indexed, rewritten, err
	}
	return indexed, rewritten, pb.Commit(pebble.Sync)
}

// LiveOpFloor is the lowest first-event sequence of an op the store holds
// in a state that is not terminal (ready, held, granted or executing);
// math.MaxUint64 when there is none. Events of ops below it have all
// ended; the ops stream may let them go once they are archived (ADR 0026).
func (s *Store) LiveOpFloor() (uint64, error) {
	floor := uint64(math.MaxUint64)
	for _, st := range []events.State{events.StateReady, events.StateHeld, events.StateGranted, events.StateExecuting} {
		prefix := []byte("s/" + string(st) + "/")
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return 0, err
		}
		// Keys are by first sequence: the first is the lowest.
		if it.First() {
			k := it.Key()
			if len(k) < len(prefix)+9 {
				it.Close()
				return 0, fmt.Errorf("store: malformed state key %q", k)
			}
			floor = min(floor, binary.BigEndian.Uint64(k[len(prefix):]))
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return 0, err
		}
	}
	return floor, nil
}
