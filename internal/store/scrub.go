package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/events"
	"github.com/cockroachdb/pebble/v2"
)

// The scrub index lists the ops whose request message, the only copy of
// their argument plaintext, is to be erased from AIRLOCK_REQUESTS:
//
//	x/<first seq>/<op id>   request seq to erase (8 bytes, big endian)
//	m/scrub-indexed         present once IndexScrubs has indexed the
//	                        terminal ops stored before the index existed
//
// Commit writes an op's x/ key in the same Pebble batch as the transition
// that makes the op terminal, so no terminal op is ever without one. The
// scrubber erases the message and then deletes the key: a crash in
// between leaves the key, and the erase is done again (it is idempotent).

const scrubPrefix = "x/"

var keyScrubIndexed = []byte("m/scrub-indexed")

// markScrub is Commit's hook: it indexes the op of e for scrubbing when
// this batch moves it into a terminal state.
func markScrub(pb writer, e *entry) error {
	if e.from.Terminal() || !e.op.State.Terminal() || e.op.RequestSeq == 0 {
		return nil
	}
	return pb.Set(orderKey(scrubPrefix, e.op), scrubValue(e.op), nil)
}

func seqBytes(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

// scrubValue is a scrub entry's value: the request's sequence, and a
// ninth byte 1 when the op was held (its request was moved to
// AIRLOCK_HELD, which the scrub erases too).
func scrubValue(op *events.Op) []byte {
	v := seqBytes(op.RequestSeq)
	if op.HoldID != "" {
		v = append(v, 1)
	}
	return v
}

// Scrub is one entry of the scrub index: the terminal op OpID, whose
// request message RequestSeq in AIRLOCK_REQUESTS is to be erased.
type Scrub struct {
	OpID       string
	RequestSeq uint64
	// Held: the op was held, and its request copied to AIRLOCK_HELD.
	Held bool
	key  []byte
}

// PendingScrubs returns up to limit entries of the scrub index, oldest
// op first.
func (s *Store) PendingScrubs(limit int) ([]Scrub, error) {
	prefix := []byte(scrubPrefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Scrub
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) < len(prefix)+9 || (len(v) != 8 && len(v) != 9) {
			return nil, fmt.Errorf("store: malformed scrub entry %q", k)
		}
		out = append(out, Scrub{
			OpID:       string(k[len(prefix)+9:]),
			RequestSeq: binary.BigEndian.Uint64(v),
			Held:       len(v) == 9 && v[8] == 1,
			key:        append([]byte(nil), k...),
		})
	}
	return out, it.Error()
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
		err = json.Unmarshal(raw, op)
		stale := bytes.Contains(raw, []byte(`"result":`))
		closer.Close()
		if err != nil {
			return indexed, rewritten, fmt.Errorf("store: op %s: %w", id, err)
		}
		if stale {
			// The struct has no result: writing the op back drops it.
			v, err := events.MarshalJSON(op)
			if err == nil {
				err = pb.Set(opKey(id), v, nil)
			}
			if err != nil {
				return indexed, rewritten, err
			}
			rewritten++
		}
		if op.RequestSeq != 0 {
			if err := pb.Set(orderKey(scrubPrefix, op), scrubValue(op), nil); err != nil {
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
