package main

import (
	"context"
	"sync"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/producers"
)

// remoteLog is the log an Auditor reads as an audit.Source, page by page
// up to the size the server reported first. It has no stored hashes: the
// verifier recomputes every one.
func remoteLog(ctx context.Context, a *producers.Auditor) audit.Source {
	return &remoteSource{a: a, ctx: ctx, size: -1}
}

type remoteSource struct {
	a   *producers.Auditor
	ctx context.Context
	mu  sync.Mutex // verify's readers share the source
	// size is the one the server reported first; -1 until then.
	size int64
}

func (r *remoteSource) LogSize() (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.size >= 0 {
		return r.size, nil
	}
	page, err := r.a.Leaves(r.ctx, 0, 1)
	if err != nil {
		return 0, err
	}
	r.size = page.Size
	return r.size, nil
}

func (r *remoteSource) Leaves(from int64, fn func(int64, []byte) error) error {
	size, err := r.LogSize()
	if err != nil {
		return err
	}
	return r.LeavesBetween(from, size, fn)
}

// LeavesBetween reads the leaves of from to to (excluded) in pages of at
// most events.MaxAuditPage, none beyond to (audit.LeafRangeSource: each of
// verify's readers asks for its own stripe).
func (r *remoteSource) LeavesBetween(from, to int64, fn func(int64, []byte) error) error {
	size, err := r.LogSize()
	if err != nil {
		return err
	}
	size = min(size, to)
	for i := from; i < size; {
		page, err := r.a.Leaves(r.ctx, i, int(min(int64(events.MaxAuditPage), size-i)))
		if err != nil {
			return err
		}
		if len(page.Leaves) == 0 {
			return nil // the verifier reports the missing leaf
		}
		for _, l := range page.Leaves {
			if i >= size {
				return nil
			}
			if err := fn(i, l); err != nil {
				return err
			}
			i++
		}
	}
	return nil
}

func (r *remoteSource) HashCursor() (audit.HashCursor, error) { return nil, audit.ErrNoStoredHashes }

func (r *remoteSource) Checkpoints() (sizes []int64, notes [][]byte, err error) {
	size, err := r.LogSize()
	if err != nil {
		return nil, nil, err
	}
	var from int64
	for {
		page, err := r.a.Checkpoints(r.ctx, from, events.MaxAuditPage)
		if err != nil {
			return nil, nil, err
		}
		for i, s := range page.Sizes {
			// Checkpoints signed after the size was read cover leaves
			// this verification does not read.
			if s <= size {
				sizes, notes = append(sizes, s), append(notes, page.Notes[i])
			}
		}
		if page.Next == 0 {
			return sizes, notes, nil
		}
		from = page.Next
	}
}
