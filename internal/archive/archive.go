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
// stream's leader, so that a replica behind it never hides a segment just
// stored. It is safe for concurrent use.
type Archive struct {
	js jetstream.JetStream

	mu     sync.Mutex
	ranges map[uint64][2]uint64 // stored segments' ranges, by their sequence
}

// New returns the archive of the deployment js reaches.
func New(js jetstream.JetStream) *Archive {
	return &Archive{js: js, ranges: make(map[uint64][2]uint64)}
}

// maxRanges bounds the ranges Find keeps: beyond it, it forgets them all.
const maxRanges = 1 << 20

// rangeOf is the range of the segment at seq, from the ranges Find
// keeps, else read.
func (a *Archive) rangeOf(ctx context.Context, seq uint64) (from, to uint64, err error) {
	a.mu.Lock()
	r, ok := a.ranges[seq]
	a.mu.Unlock()
	if ok {
		return r[0], r[1], nil
	}
	raw, err := oplog.LeaderMsg(ctx, a.js, streams.Archive, seq)
	if err != nil {
		return 0, 0, fmt.Errorf("archive: segment %d: %w", seq, err)
	}
	if from, to, err = bounds(raw); err != nil {
		return 0, 0, err
	}
	a.mu.Lock()
	if len(a.ranges) >= maxRanges {
		clear(a.ranges)
	}
	a.ranges[seq] = [2]uint64{from, to}
	a.mu.Unlock()
	return from, to, nil
}

// ErrBehind is returned by Append when the archive has a segment after the
// one named: another process stored it first.
var ErrBehind = errors.New("archive: another segment was stored first")

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
	m.Data = seg.Encode(make([]byte, 0, 64+segmentSize(seg)))
	ack, err := a.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(last))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, ErrBehind
	}
	if err != nil {
		return 0, fmt.Errorf("archive: store segment [%d, %d): %w", seg.From, seg.To, err)
	}
	return ack.Sequence, nil
}

func segmentSize(seg *Segment) int {
	n := 0
	for i := range seg.Msgs {
		n += seg.Msgs[i].Size()
	}
	return n
}

// Segment reads and decodes the segment at stream sequence seq.
func (a *Archive) Segment(ctx context.Context, seq uint64) (*Segment, error) {
	raw, err := oplog.LeaderMsg(ctx, a.js, streams.Archive, seq)
	if err != nil {
		return nil, fmt.Errorf("archive: segment %d: %w", seq, err)
	}
	s, err := Decode(raw.Data)
	if err != nil {
		return nil, fmt.Errorf("archive: segment %d: %w", seq, err)
	}
	return s, nil
}

// Find returns the stream sequence of the segment that covers sequence s
// of AIRLOCK_OPS, searching the segments at stream sequences first to last
// (Tail's last) by their headers. found is false when s is at or past the
// archive's end, or below its first segment.
func (a *Archive) Find(ctx context.Context, s, last uint64) (seq uint64, found bool, err error) {
	st, err := a.js.Stream(ctx, streams.Archive)
	if err != nil {
		return 0, false, fmt.Errorf("archive: %w", err)
	}
	lo, hi := st.CachedInfo().State.FirstSeq, last
	for lo <= hi && hi != 0 {
		mid := lo + (hi-lo)/2
		from, to, err := a.rangeOf(ctx, mid)
		if err != nil {
			return 0, false, err
		}
		switch {
		case s < from:
			hi = mid - 1
		case s >= to:
			lo = mid + 1
		default:
			return mid, true, nil
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
