package projector

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/nats-io/nats.go/jetstream"
)

// Segment sizes: a segment is stored once its messages take
// DefaultSegmentBytes, or once its first is DefaultSegmentEvery old.
const (
	DefaultSegmentBytes = 256 << 10
	DefaultSegmentEvery = time.Second
)

// segments is what the projector keeps of the archive (ADR 0026): where
// it ends, and the messages read since, to be stored as its next segment
// when Config.WriteArchive is set.
type segments struct {
	a *archive.Archive
	// end is the archive's end as last read or written: every message of
	// the stream below it has a copy in a segment. last is the archive's
	// newest segment's own sequence, for the next one's compare-and-swap.
	end, last uint64
	write     bool
	// msgs are the messages read at or after end, in order, not yet in a
	// segment; bytes is about their size and since when the first came.
	msgs  []archive.Msg
	bytes int
	since time.Time
	// maxBytes and every: Config.SegmentBytes and SegmentEvery.
	maxBytes int
	every    time.Duration
	// ended is end, for other goroutines (ArchiveEnd).
	ended atomic.Uint64
	// cur is the segment fill read last, at sequence curSeq: gaps between
	// the messages the stream keeps (rejections, records) fall in one
	// segment many times over.
	cur    *archive.Segment
	curSeq uint64
}

// segment reads the archive's first segment at or after seq, or returns
// the one read last when it is that one, with its own sequence.
func (s *segments) segment(ctx context.Context, seq uint64) (*archive.Segment, uint64, error) {
	if s.cur != nil && s.curSeq == seq {
		return s.cur, seq, nil
	}
	seg, at, err := s.a.Segment(ctx, seq)
	if err != nil {
		return nil, 0, err
	}
	s.cur, s.curSeq = seg, at
	return seg, at, nil
}

// setEnd records the archive's end and newest segment.
func (s *segments) setEnd(end, last uint64) {
	s.end, s.last = end, last
	s.ended.Store(end)
}

// ArchiveEnd is the archive's end as this projector last read or wrote
// it: every message of the stream below it has a copy in a segment. It is
// 0 without Config.Archive, and before the projector's first read.
func (p *Projector) ArchiveEnd() uint64 {
	if p.seg == nil {
		return 0
	}
	return p.seg.ended.Load()
}

// tail reads the archive's end and newest segment again.
func (s *segments) tail(ctx context.Context) error {
	end, last, err := s.a.Tail(ctx)
	if err != nil {
		return err
	}
	s.setEnd(end, last)
	s.trim()
	return nil
}

// trim drops the messages below the archive's end.
func (s *segments) trim() {
	i := 0
	for i < len(s.msgs) && s.msgs[i].Seq < s.end {
		s.bytes -= s.msgs[i].Size()
		i++
	}
	if i > 0 {
		clear(s.msgs[:i])
		s.msgs = append(s.msgs[:0], s.msgs[i:]...)
		if len(s.msgs) == 0 {
			s.bytes = 0
		}
	}
}

// add keeps m for the next segment: m is a message of the stream read in
// order, at or after the archive's end.
func (s *segments) add(m archive.Msg) {
	if !s.write || m.Seq < s.end || (len(s.msgs) > 0 && m.Seq <= s.msgs[len(s.msgs)-1].Seq) {
		return
	}
	if len(s.msgs) == 0 {
		s.since = time.Now()
	}
	s.msgs = append(s.msgs, m)
	s.bytes += s.msgs[len(s.msgs)-1].Size()
}

// due reports whether the messages kept make a segment now.
func (s *segments) due() bool {
	return len(s.msgs) > 0 && (s.bytes >= s.maxBytes || time.Since(s.since) >= s.every)
}

// flush stores the messages kept, in segments of about maxBytes each.
// Another process may have stored them first: then the archive's end is
// read again and what it covers is dropped. A failure keeps them for the
// next flush; it is logged, not returned, since the projection does not
// depend on it.
func (p *Projector) flush(ctx context.Context) {
	s := p.seg
	for len(s.msgs) > 0 {
		n, size := 0, 0
		for n < len(s.msgs) && (n == 0 || size+s.msgs[n].Size() <= s.maxBytes) {
			size += s.msgs[n].Size()
			n++
		}
		seg := &archive.Segment{From: s.end, To: s.msgs[n-1].Seq + 1, Msgs: s.msgs[:n]}
		seq, err := s.a.Append(ctx, seg, s.last)
		if errors.Is(err, archive.ErrBehind) {
			if err := s.tail(ctx); err != nil {
				p.cfg.Logger.Warn("archive: reading its end failed; trying again later", "err", err)
				return
			}
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Logger.Warn("archive: segment not stored; trying again later", "from", seg.From, "to", seg.To, "err", err)
			}
			return
		}
		s.setEnd(seg.To, seq)
		s.trim()
		if len(s.msgs) > 0 {
			s.since = time.Now()
		}
	}
}

// gap reports whether m comes after messages the stream no longer holds:
// their copies are read from the archive first (fill).
func (p *Projector) gap(m jetstream.Msg) bool {
	if p.seg == nil {
		return false
	}
	md, err := m.Metadata()
	return err == nil && md.Sequence.Stream > p.next
}

// fillBefore applies the messages of the archive from p.next up to the
// one before m, the next message the stream holds (fill).
func (p *Projector) fillBefore(ctx context.Context, m jetstream.Msg) error {
	md, err := m.Metadata()
	if err != nil {
		return fmt.Errorf("projector: metadata: %w", err)
	}
	return p.fill(ctx, md.Sequence.Stream, true)
}

// fillIdle applies what the archive holds beyond the last message
// applied, when the stream delivers nothing more: the stream's newest
// messages may have left it (a replay of a stream whose last ops ended
// long ago). What the stream still holds of it is passed over when it
// comes.
func (p *Projector) fillIdle(ctx context.Context) error {
	if p.seg == nil || p.seg.end <= p.next {
		return nil
	}
	return p.fill(ctx, p.seg.end, false)
}

// fill applies the messages of the archive from p.next up to, not
// including, to, in batches of its own. With held, the stream holds the
// message at to: what neither holds below it is logged and passed over.
func (p *Projector) fill(ctx context.Context, to uint64, held bool) error {
	from := p.next
	if to > p.seg.end {
		// Segments stored since the end was read cover more.
		if err := p.seg.tail(ctx); err != nil {
			return &readError{err}
		}
	}
	s := p.seg
	if from < s.end {
		seq, found, err := s.curSeq, true, error(nil)
		if s.cur == nil || from < s.cur.From || from >= s.cur.To {
			seq, found, err = s.a.Find(ctx, from, s.last)
		}
		if err != nil {
			return &readError{err}
		}
		if !found {
			return &readError{fmt.Errorf("archive: no segment covers sequence %d below its end %d", from, s.end)}
		}
		b, n := p.cfg.Store.NewBatch(), 0
		for seq <= s.last && p.next < min(to, s.end) {
			seg, at, err := s.segment(ctx, seq)
			if err != nil {
				b.Abort()
				return &readError{err}
			}
			seq = at + 1
			for _, am := range seg.Msgs {
				if am.Seq < p.next || am.Seq >= to {
					continue
				}
				if err := p.apply(b, am); err != nil {
					b.Abort()
					p.pending = p.pending[:0]
					return err
				}
				if n++; n >= p.cfg.MaxBatch {
					if err := p.commit(ctx, b, int64(n), false); err != nil {
						return err
					}
					b, n = p.cfg.Store.NewBatch(), 0
				}
			}
			p.next = max(p.next, min(seg.To, to))
		}
		if n == 0 {
			b.Abort()
		} else if err := p.commit(ctx, b, int64(n), false); err != nil {
			return err
		}
		p.filled.Add(1)
	}
	if held && p.next < to {
		p.cfg.Logger.Error("messages missing from the stream and from its archive; passed over", "stream", p.cfg.Stream, "from", p.next, "to", to, "archive_end", s.end)
		p.next = to
	}
	return nil
}

// asMsg is m as the archive keeps it.
func asMsg(m jetstream.Msg) (archive.Msg, error) {
	md, err := m.Metadata()
	if err != nil {
		return archive.Msg{}, fmt.Errorf("projector: metadata: %w", err)
	}
	return archive.Msg{Seq: md.Sequence.Stream, Time: md.Timestamp, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, nil
}
