package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/cockroachdb/pebble/v2"
)

// The results index lists the completed ops whose result is kept (sealed,
// in AIRLOCK_RESULTS), soonest erased first, and how many bytes each
// workspace keeps:
//
//	k/<kept until, unix ns>/<op id>        <ws> NUL <result bytes> (8 bytes, big endian)
//	kw/<ws>/<first seq>/<op id>            the same, by workspace, oldest op first
//	rb/<ws>                                result bytes kept (8 bytes, big endian)
//
// Commit writes both in the batch that projects the completed event, and
// takes them back in the batch that projects the result_erased event: the
// eraser (projector.Eraser) erases a result and then appends that event,
// so a crash in between leaves the entry, and the erasure is done again.

const (
	keptPrefix     = "k/"
	keptWSPrefix   = "kw/"
	retainedPrefix = "rb/"
)

// Kept is one entry of the results index.
type Kept struct {
	OpID, Workspace string
	Until           time.Time
	Bytes           int64
}

func keptKey(op *events.Op) []byte {
	k := make([]byte, 0, len(keptPrefix)+9+len(op.ID))
	k = append(k, keptPrefix...)
	k = binary.BigEndian.AppendUint64(k, uint64(op.ResultKeptUntil.UnixNano()))
	k = append(k, '/')
	return append(k, op.ID...)
}

// markResult is Commit's hook for the results index: e's op has its
// result kept from this batch on, or erased in it.
func markResult(pb writer, e *entry, delta map[string]int64) error {
	op := e.op
	kept := keptNow(op)
	if kept == e.fromKept {
		return nil
	}
	wsKey := orderKey(keptWSPrefix+op.Workspace+"/", op)
	if kept {
		v := append([]byte(op.Workspace+"\x00"), binary.BigEndian.AppendUint64(nil, uint64(op.ResultBytes))...)
		delta[op.Workspace] += int64(op.ResultBytes)
		if err := pb.Set(wsKey, v, nil); err != nil {
			return err
		}
		return pb.Set(keptKey(op), v, nil)
	}
	delta[op.Workspace] -= int64(op.ResultBytes)
	if err := pb.Delete(wsKey, nil); err != nil {
		return err
	}
	return pb.Delete(keptKey(op), nil)
}

func keptNow(op *events.Op) bool {
	return op.State == events.StateCompleted && op.ResultKeptUntil != nil && op.ResultErased == ""
}

// writeRetained adds delta to the stored bytes of each workspace.
func (s *Store) writeRetained(pb writer, delta map[string]int64) error {
	for ws, d := range delta {
		if d == 0 {
			continue
		}
		n, err := s.RetainedBytes(ws)
		if err != nil {
			return err
		}
		v := binary.BigEndian.AppendUint64(nil, uint64(max(n+d, 0)))
		if err := pb.Set([]byte(retainedPrefix+ws), v, nil); err != nil {
			return err
		}
	}
	return nil
}

// RetainedBytes is how many result bytes workspace ws keeps.
func (s *Store) RetainedBytes(ws string) (int64, error) {
	v, closer, err := s.db.Get([]byte(retainedPrefix + ws))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("store: malformed retained bytes of %s", ws)
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// Retained is the result bytes every workspace keeps, by workspace.
func (s *Store) Retained() (map[string]int64, error) {
	prefix := []byte(retainedPrefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[string]int64{}
	for ok := it.First(); ok; ok = it.Next() {
		if v := it.Value(); len(v) == 8 {
			if n := int64(binary.BigEndian.Uint64(v)); n > 0 {
				out[string(it.Key()[len(prefix):])] = n
			}
		}
	}
	return out, it.Error()
}

// KeptResults returns up to limit kept results, soonest erased first,
// that are kept until no later than before (the zero time: all), of
// workspace ws ("" for every workspace).
func (s *Store) KeptResults(ws string, before time.Time, limit int) ([]Kept, error) {
	prefix := []byte(keptPrefix)
	opts := &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)}
	if !before.IsZero() {
		opts.UpperBound = binary.BigEndian.AppendUint64([]byte(keptPrefix), uint64(before.UnixNano())+1)
	}
	return s.kept(opts, ws, limit, true)
}

// OldestResults returns up to limit kept results of workspace ws, oldest
// op first (by its first event): what goes when the workspace keeps too
// many bytes. Until is left zero.
func (s *Store) OldestResults(ws string, limit int) ([]Kept, error) {
	prefix := []byte(keptWSPrefix + ws + "/")
	return s.kept(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)}, ws, limit, false)
}

// kept reads index entries; byTime: the k/ index, whose keys hold the
// kept-until time, else the kw/ one.
func (s *Store) kept(opts *pebble.IterOptions, ws string, limit int, byTime bool) ([]Kept, error) {
	prefix := opts.LowerBound
	it, err := s.db.NewIter(opts)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Kept
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		k, v := it.Key(), it.Value()
		w, size, found := strings.Cut(string(v), "\x00")
		if len(k) < len(prefix)+9 || !found || len(size) != 8 {
			return nil, fmt.Errorf("store: malformed results entry %q", k)
		}
		if ws != "" && w != ws {
			continue
		}
		e := Kept{OpID: string(k[len(prefix)+9:]), Workspace: w, Bytes: int64(binary.BigEndian.Uint64([]byte(size)))}
		if byTime {
			e.Until = time.Unix(0, int64(binary.BigEndian.Uint64(k[len(prefix):]))).UTC()
		}
		out = append(out, e)
	}
	return out, it.Error()
}
