package archive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Archive reads and writes AIRLOCK_ARCHIVE. Every read is answered by the
// stream's leader, so that a replica behind it never hides a segment or a
// floor just stored. It is safe for concurrent use.
type Archive struct {
	js jetstream.JetStream

	mu     sync.Mutex
	ranges map[uint64]span // what rangeOf read, by the sequence asked for
}

// span is a stored segment's own sequence and range.
type span struct{ seq, from, to uint64 }

// New returns the archive of the deployment js reaches.
func New(js jetstream.JetStream) *Archive {
	return &Archive{js: js, ranges: make(map[uint64]span)}
}

// ErrBehind is returned by Append when the archive has a segment after the
// one named: another process stored it first.
var ErrBehind = errors.New("archive: another segment was stored first")

// HeaderFloor is the header of a stored floor.
const HeaderFloor = "Airlock-Ops-Floor"

// Tail is the archive's end (every message of AIRLOCK_OPS below it has a
// copy in a segment; 1 when the archive is empty) and the stream sequence
// of its last segment (0 when it is empty).
func (a *Archive) Tail(ctx context.Context) (end, last uint64, err error) {
	raw, err := oplog.LeaderLastMsg(ctx, a.js, streams.Archive, events.ArchiveSubject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 1, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("archive: tail: %w", err)
	}
	_, to, err := bounds(raw)
	if err != nil {
		return 0, 0, err
	}
	return to, raw.Sequence, nil
}

// Append stores seg as the segment after the one at stream sequence last
// (0: as the first), and returns its own sequence. It returns ErrBehind when
// the archive holds another segment after last. seg.From must be the end
// of the segment at last (1 for the first).
func (a *Archive) Append(ctx context.Context, seg *Segment, last uint64) (uint64, error) {
	m := nats.NewMsg(events.ArchiveSubject)
	m.Header.Set(HeaderFrom, strconv.FormatUint(seg.From, 10))
	m.Header.Set(HeaderTo, strconv.FormatUint(seg.To, 10))
	e := encoders.Get().(*Encoder)
	defer encoders.Put(e)
	m.Data = e.Encode(seg) // PublishMsg copies it before it returns
	ack, err := a.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequenceForSubject(last, events.ArchiveSubject))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, ErrBehind
	}
	if err != nil {
		return 0, fmt.Errorf("archive: store segment [%d, %d): %w", seg.From, seg.To, err)
	}
	return ack.Sequence, nil
}

// encoders keeps Append's buffers from one segment to the next.
var encoders = sync.Pool{New: func() any { return new(Encoder) }}

// RaiseFloor stores floor as the ops floor, unless a floor as high or
// higher is stored already: the op events of AIRLOCK_OPS below it may
// leave the stream once it returns (ADR 0026). The stored floor never goes
// down: a process whose projection lags, and so computes a lower floor,
// leaves the higher one in place, with a compare-and-swap on the floor
// subject against one stored meanwhile.
func (a *Archive) RaiseFloor(ctx context.Context, floor uint64) error {
	for range maxFloorTries {
		cur, at, err := a.floor(ctx)
		if err != nil {
			return err
		}
		if cur >= floor {
			return nil
		}
		m := nats.NewMsg(events.ArchiveFloorSubject)
		m.Header.Set(HeaderFloor, strconv.FormatUint(floor, 10))
		_, err = a.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequenceForSubject(at, events.ArchiveFloorSubject))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			continue // another process stored one: read it again
		}
		if err != nil {
			return fmt.Errorf("archive: store the ops floor %d: %w", floor, err)
		}
		return nil
	}
	return fmt.Errorf("archive: store the ops floor %d: other processes kept storing theirs", floor)
}

// maxFloorTries bounds RaiseFloor's compare-and-swaps.
const maxFloorTries = 8

// Floor is the ops floor stored (RaiseFloor); 0 when none is.
func (a *Archive) Floor(ctx context.Context) (uint64, error) {
	f, _, err := a.floor(ctx)
	return f, err
}

// floor is the ops floor stored and its own sequence; 0, 0 when none is.
func (a *Archive) floor(ctx context.Context) (floor, at uint64, err error) {
	raw, err := oplog.LeaderLastMsg(ctx, a.js, streams.Archive, events.ArchiveFloorSubject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("archive: ops floor: %w", err)
	}
	f, err := strconv.ParseUint(raw.Header.Get(HeaderFloor), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: ops floor at %d: %v", ErrCorrupt, raw.Sequence, err)
	}
	return f, raw.Sequence, nil
}

// Segment reads and decodes the first segment stored at or after stream
// sequence seq, and returns it with its own sequence.
func (a *Archive) Segment(ctx context.Context, seq uint64) (*Segment, uint64, error) {
	raw, err := oplog.LeaderNextMsg(ctx, a.js, streams.Archive, seq, events.ArchiveSubject)
	if err != nil {
		return nil, 0, fmt.Errorf("archive: segment at or after %d: %w", seq, err)
	}
	s, err := Decode(raw.Data)
	if err != nil {
		return nil, 0, fmt.Errorf("archive: segment %d: %w", raw.Sequence, err)
	}
	return s, raw.Sequence, nil
}

// maxRanges bounds the ranges Find keeps: beyond it, it forgets them all.
const maxRanges = 1 << 20

// rangeOf is the first segment stored at or after seq: its own sequence
// and range, from what Find keeps, else read. found is false when no
// segment is.
func (a *Archive) rangeOf(ctx context.Context, seq uint64) (span, bool, error) {
	a.mu.Lock()
	r, ok := a.ranges[seq]
	a.mu.Unlock()
	if ok {
		return r, true, nil
	}
	raw, err := oplog.LeaderNextMsg(ctx, a.js, streams.Archive, seq, events.ArchiveSubject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return span{}, false, nil
	}
	if err != nil {
		return span{}, false, fmt.Errorf("archive: segment at or after %d: %w", seq, err)
	}
	from, to, err := bounds(raw)
	if err != nil {
		return span{}, false, err
	}
	r = span{seq: raw.Sequence, from: from, to: to}
	a.mu.Lock()
	if len(a.ranges) >= maxRanges {
		clear(a.ranges)
	}
	a.ranges[seq] = r
	a.mu.Unlock()
	return r, true, nil
}

// Find returns the stream sequence of the segment that covers sequence s
// of AIRLOCK_OPS, searching the stream's sequences up to last (Tail's
// last) by the segments' headers. found is false when s is at or past
// the archive's end, or below its first segment.
func (a *Archive) Find(ctx context.Context, s, last uint64) (seq uint64, found bool, err error) {
	lo, hi := uint64(1), last
	for lo <= hi && hi != 0 {
		mid := lo + (hi-lo)/2
		r, ok, err := a.rangeOf(ctx, mid)
		if err != nil {
			return 0, false, err
		}
		switch {
		case !ok || r.seq > hi || s < r.from:
			hi = mid - 1
		case s >= r.to:
			lo = r.seq + 1
		default:
			return r.seq, true, nil
		}
	}
	return 0, false, nil
}

// bounds is a stored segment's range, from its headers.
func bounds(raw *jetstream.RawStreamMsg) (from, to uint64, err error) {
	from, ferr := strconv.ParseUint(raw.Header.Get(HeaderFrom), 10, 64)
	to, terr := strconv.ParseUint(raw.Header.Get(HeaderTo), 10, 64)
	if ferr != nil || terr != nil || from == 0 || to < from {
		return 0, 0, fmt.Errorf("%w: segment %d has no valid range (%s %q, %s %q)", ErrCorrupt, raw.Sequence,
			HeaderFrom, raw.Header.Get(HeaderFrom), HeaderTo, raw.Header.Get(HeaderTo))
	}
	return from, to, nil
}
