package projector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/nats-io/nats.go/jetstream"
)

// Archived tells a retry of an op that left the ops stream for the archive
// (ADR 0026) from a new op. Such a retry's first event is stored: nothing
// under the op's subjects is left to refuse it. Before anything acts on
// that event, Settle makes sure this process's projection holds every op
// that left the stream before it, and Duplicate then says whether the op
// is one of them; Restate ends the retry with the archived outcome.
type Archived struct {
	p    *Projector
	st   *store.Store
	js   jetstream.JetStream
	a    *archive.Archive
	keep uint64 // the messages every purge leaves (OpsPurgerConfig.Keep)

	mu   sync.Mutex
	last *floorRead // the newest read answered
	next *floorRead // the newest read sent
	// startFloor is a floor read after this process started (startRead
	// once it is): every purge made before then, with whatever keep, is
	// below it. A settle answers within keep only once the projection
	// has passed it.
	startFloor uint64
	startRead  bool
	created    time.Time
	head       atomic.Uint64 // the highest sequence settled

	skipped atomic.Uint64 // settles the projection answered alone
	reads   atomic.Uint64 // settles that waited on a read of the floor
}

// Settles counts the settles that waited on a read of the ops floor, and
// those the projection answered alone: it had applied every message below
// the caller's events.
func (x *Archived) Settles() (read, answered uint64) { return x.reads.Load(), x.skipped.Load() }

// floorRead is one read of the newest ops floor.
type floorRead struct {
	sent  time.Time
	done  chan struct{}
	floor uint64
	err   error
}

// NewArchived returns the archived ops of p's stream, as p's store holds
// them. keep is the stream's streams.OpsArchiveKeep: how many of its
// newest messages every purge of the deployment leaves.
func NewArchived(p *Projector, st *store.Store, js jetstream.JetStream, keep uint64) *Archived {
	return &Archived{p: p, st: st, js: js, a: p.cfg.Archive, keep: keep, created: time.Now()}
}

// settleTimeout bounds Settle's read and wait when ctx has no deadline.
const settleTimeout = 5 * time.Second

// Settle returns once this process's projection holds every op whose
// events left the ops stream before after: the caller's first events were
// acknowledged before after. It reads, on the archive stream's leader,
// the newest ops floor (every purge of the ops stream stores its floor
// first; one read, sent after after, answers every caller waiting at
// once), and waits for the projector to apply everything below it,
// reading what left from the archive.
//
// No read is needed when the projector has applied every message below
// upTo, the highest sequence among the caller's events (ADR 0028); nor
// when it has applied every message below upTo-keep and below the floor
// read once after this process started (ADR 0030): an op whose events
// left before one of the caller's was stored left in a purge made before
// it, whose floor is at most upTo-keep when the purge kept keep (every
// purge since this process started: the deployment's processes share
// keep), and at most that start floor when it was made before. No clock
// is read: only sequences of the stream.
func (x *Archived) Settle(ctx context.Context, after time.Time, upTo uint64) error {
	return x.settle(ctx, after, upTo, x.keep)
}

// SettleThrough returns once this process's projection holds every op
// with an event below upTo, whenever that op's events left the ops
// stream: before or after the event at upTo was stored. It is Settle
// without the keep (a purge after upTo's event may take events below
// it), for an event that was not stored after its op's events left.
func (x *Archived) SettleThrough(ctx context.Context, after time.Time, upTo uint64) error {
	return x.settle(ctx, after, upTo, 0)
}

func (x *Archived) settle(ctx context.Context, after time.Time, upTo, keep uint64) error {
	if upTo > 0 {
		for h := x.head.Load(); upTo > h && !x.head.CompareAndSwap(h, upTo); h = x.head.Load() {
		}
		applied := x.p.Applied()
		if applied+1 >= upTo || (keep > 0 && applied+1+keep >= upTo && x.pastStart(ctx, applied)) {
			x.skipped.Add(1)
			return nil
		}
	}
	x.reads.Add(1)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, settleTimeout)
		defer cancel()
	}
	floor, err := x.floor(ctx, after)
	if err != nil {
		return fmt.Errorf("archived ops: %w", err)
	}
	if floor <= 1 || x.p.Applied() >= floor-1 {
		return nil
	}
	if err := x.p.WaitApplied(ctx, floor-1); err != nil {
		return fmt.Errorf("archived ops: the projection is behind the ops stream's first op event %d: %w", floor, err)
	}
	return nil
}

// pastStart reports whether the projection, at applied, has passed the
// floor read after this process started; the first call reads it.
func (x *Archived) pastStart(ctx context.Context, applied uint64) bool {
	x.mu.Lock()
	floor, read := x.startFloor, x.startRead
	x.mu.Unlock()
	if !read {
		var err error
		if floor, err = x.floor(ctx, x.created); err != nil {
			return false // read again by the settle
		}
		x.mu.Lock()
		x.startFloor, x.startRead = floor, true
		x.mu.Unlock()
	}
	return applied+1 >= floor
}

// CatchUp returns once the projection has folded everything below the
// ops floor as last read (read now when none was, or, with a keep, when
// the projection is more than keep behind the newest events settled),
// before the caller stores first events: a process whose projection is
// far behind (a new one, catching up from the archive) then holds its
// requests back, rather than store first events it cannot tell apart yet
// and have to take back. Settle, after the append, stays what makes a
// retry safe.
func (x *Archived) CatchUp(ctx context.Context) error {
	x.mu.Lock()
	l := x.last
	x.mu.Unlock()
	// With a keep, settles rarely read, and the last floor read may be
	// old: one far behind the newest events settled is read again.
	behind := x.keep > 0 && x.p.Applied()+1+x.keep < x.head.Load()
	floor := uint64(0)
	if l != nil && l.err == nil && !behind {
		floor = l.floor
	} else {
		var after time.Time
		if behind {
			after = time.Now()
		}
		var err error
		if floor, err = x.floor(ctx, after); err != nil {
			return fmt.Errorf("archived ops: %w", err)
		}
	}
	if floor <= 1 || x.p.Applied() >= floor-1 {
		return nil
	}
	if err := x.p.WaitApplied(ctx, floor-1); err != nil {
		return fmt.Errorf("archived ops: the projection is catching up with the ops floor %d (at %d): %w", floor, x.p.Applied(), err)
	}
	return nil
}

// floor is the newest ops floor, read after after.
func (x *Archived) floor(ctx context.Context, after time.Time) (uint64, error) {
	x.mu.Lock()
	if l := x.last; l != nil && l.err == nil && !l.sent.Before(after) {
		x.mu.Unlock()
		return l.floor, nil
	}
	r := x.next
	mine := r == nil || r.sent.Before(after)
	if mine {
		r = &floorRead{sent: time.Now(), done: make(chan struct{})}
		x.next = r
	}
	x.mu.Unlock()
	if mine {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		r.floor, r.err = x.a.Floor(rctx)
		cancel()
		close(r.done)
		x.mu.Lock()
		if x.last == nil || x.last.sent.Before(r.sent) {
			x.last = r
		}
		if x.next == r {
			x.next = nil
		}
		x.mu.Unlock()
	}
	select {
	case <-r.done:
		return r.floor, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Duplicate returns the archived op of which the event at seq is a retry,
// or nil when it is none: seq is the retry's first event, or an event
// after it (the decided event of a retry that was held). Call Settle
// first.
func (x *Archived) Duplicate(opID string, seq uint64) (*events.Op, error) {
	if !x.st.MaybeEnded(opID) {
		return nil, nil // no ended op of that id: a new op
	}
	op, err := x.st.Op(opID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The archived op ended below the retry; a new op, or the retry as
	// the projector folds it, begins at it.
	if op.State.Terminal() && op.FirstSeq < seq && op.Version <= seq {
		return op, nil
	}
	return nil, nil
}

// ErrRestateConflict is wrapped by Restate's error when the retry's newest
// event is no longer the one it expected.
var ErrRestateConflict = oplog.ErrConflict

// RestateSource is the ce-source of an outcome stated again when it
// carried none.
const RestateSource = "airlock/archive"

// Restate ends the retry of op whose newest event is at expect with the
// archived outcome of op, stated again (events.HeaderRestates), and
// returns it. A lost compare-and-swap (another process stated it first,
// or the retry moved on) wraps ErrRestateConflict.
func (x *Archived) Restate(ctx context.Context, op *events.Op, expect uint64) (events.Type, any, error) {
	if x.a == nil {
		return "", nil, errors.New("archived ops: no archive to read the outcome from")
	}
	ops, err := x.js.Stream(ctx, x.p.cfg.Stream)
	if err != nil {
		return "", nil, fmt.Errorf("archived ops: %w", err)
	}
	// A retry of an archived op is rare: a writer of its own, for it.
	w, err := oplog.NewWriter(x.js)
	if err != nil {
		return "", nil, err
	}
	defer w.Close()
	m, err := x.outcome(ctx, op)
	if err != nil {
		return "", nil, err
	}
	typ, _, data, err := events.DecodeStored(m.Header, m.Data)
	if err != nil {
		return "", nil, fmt.Errorf("archived ops: outcome of %s at %d: %w", op.ID, m.Seq, err)
	}
	source := m.Header.Get(events.HeaderPrefix + "source")
	if source == "" {
		source = RestateSource
	}
	if _, err := w.Append(ctx, ops, oplog.Op{Workspace: op.Workspace, ID: op.ID, Tool: op.Tool}, expect, typ, source, data, oplog.Restates(m.Seq)); err != nil {
		return "", nil, err
	}
	return typ, data, nil
}

// outcome reads op's terminal event from the archive.
func (x *Archived) outcome(ctx context.Context, op *events.Op) (*archive.Msg, error) {
	_, last, err := x.a.Tail(ctx)
	if err != nil {
		return nil, err
	}
	seq, found, err := x.a.Find(ctx, op.FirstSeq, last)
	if err != nil {
		return nil, err
	}
	for found && seq <= last {
		seg, at, err := x.a.Segment(ctx, seq)
		if err != nil {
			return nil, err
		}
		seq = at + 1
		for i := range seg.Msgs {
			m := &seg.Msgs[i]
			if m.Seq < op.FirstSeq || m.Header.Get(events.HeaderRestates) != "" {
				continue
			}
			if _, id, _, _, ok := events.OpSubjectParts(m.Subject); !ok || id != op.ID {
				continue
			}
			typ := events.Type(m.Header.Get(events.HeaderPrefix + "type"))
			switch typ {
			case events.TypeCompleted, events.TypeFailed, events.TypeDenied, events.TypeExpired, events.TypeAmbiguous:
				return m, nil
			}
		}
	}
	return nil, fmt.Errorf("archived ops: the outcome of %s (first event %s) is not in the archive", op.ID, strconv.FormatUint(op.FirstSeq, 10))
}
