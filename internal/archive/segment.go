package archive

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go"
)

// Msg is one message of AIRLOCK_OPS as the stream stored it.
type Msg struct {
	Seq     uint64
	Time    time.Time
	Subject string
	Header  nats.Header
	Data    []byte

	size int // Size, once known
}

// Size is about what m takes in a segment, before compression. It is
// counted once: m's header and data must not change after the first call.
func (m *Msg) Size() int {
	if m.size == 0 {
		n := 24 + len(m.Subject) + len(m.Data)
		for k, vs := range m.Header {
			n += len(k) + 2
			for _, v := range vs {
				n += len(v) + 2
			}
		}
		m.size = n
	}
	return m.size
}

// Segment is every message AIRLOCK_OPS stored in [From, To), in order.
type Segment struct {
	From, To uint64
	Msgs     []Msg
}

// Headers of a stored segment: its range, so that the nats CLI and a
// search for the segment holding a sequence need not decode its body.
const (
	HeaderFrom = "Airlock-Archive-From"
	HeaderTo   = "Airlock-Archive-To"
)

// The first byte of an encoded segment: its version. Version 1 is the
// body as it is; version 2, which Encode writes, is the body in one S2
// block (the archive stream stores it as it comes, with no compression of
// its own).
const (
	versionPlain = 1
	version      = 2
)

// MaxDecodedBytes bounds what a segment's body may take once decompressed:
// a segment whose block says more is corrupt. Segments are written at
// about projector.DefaultSegmentBytes, and one message is at most the ops
// stream's largest.
const MaxDecodedBytes = 64 << 20

// ErrCorrupt is wrapped by every error of Decode.
var ErrCorrupt = errors.New("archive: segment does not decode")

// Encoder encodes segments into buffers it keeps, for the next segment.
// The zero value is ready to use; it is not safe for concurrent use.
type Encoder struct {
	body, out []byte
}

// Encode returns the segment's encoding, valid until the next call: the
// version byte (2), then the body in one S2 block. The body is From, To
// and the count of messages, then each message: its sequence less the
// one before it (From less one for the first), its time in Unix
// nanoseconds, its subject, its headers (keys sorted, each with its
// values) and its data, strings and byte slices each after its length.
// Integers are varints.
func (e *Encoder) Encode(s *Segment) []byte {
	e.body = s.appendBody(e.body[:0])
	need := 1 + s2.MaxEncodedLen(len(e.body))
	if cap(e.out) < need {
		e.out = make([]byte, need)
	}
	e.out = e.out[:need]
	e.out[0] = version
	n := len(s2.Encode(e.out[1:], e.body))
	return e.out[:1+n]
}

// appendBody appends the segment's body, as Encode describes it, to b.
func (s *Segment) appendBody(b []byte) []byte {
	b = binary.AppendUvarint(b, s.From)
	b = binary.AppendUvarint(b, s.To)
	b = binary.AppendUvarint(b, uint64(len(s.Msgs)))
	prev := s.From - 1
	keys := make([]string, 0, 8)
	for i := range s.Msgs {
		m := &s.Msgs[i]
		b = binary.AppendUvarint(b, m.Seq-prev)
		prev = m.Seq
		b = binary.AppendVarint(b, m.Time.UnixNano())
		b = appendString(b, m.Subject)
		keys = keys[:0]
		for k := range m.Header {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendString(b, k)
			vs := m.Header[k]
			b = binary.AppendUvarint(b, uint64(len(vs)))
			for _, v := range vs {
				b = appendString(b, v)
			}
		}
		b = binary.AppendUvarint(b, uint64(len(m.Data)))
		b = append(b, m.Data...)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decode reads a segment Encode (or an earlier version's) wrote. The
// messages' data are copies, not slices of b.
func Decode(b []byte) (*Segment, error) {
	r := reader{b: b}
	v := r.byte()
	switch {
	case r.err != nil:
		return nil, r.err
	case v == version:
		n, err := s2.DecodedLen(r.b)
		if err != nil || n > MaxDecodedBytes {
			return nil, fmt.Errorf("%w: compressed body: %d bytes (at most %d), %v", ErrCorrupt, n, MaxDecodedBytes, err)
		}
		body, err := s2.Decode(make([]byte, n), r.b)
		if err != nil {
			return nil, fmt.Errorf("%w: compressed body: %v", ErrCorrupt, err)
		}
		return decodeBody(body, false)
	case v == versionPlain:
		return decodeBody(r.b, true)
	default:
		return nil, fmt.Errorf("%w: version %d, this build reads %d and %d: upgrade Airlock", ErrCorrupt, v, versionPlain, version)
	}
}

// decodeBody reads a segment's body; the data are copied out of b when
// copyData is set, else they are slices of it.
func decodeBody(b []byte, copyData bool) (*Segment, error) {
	r := reader{b: b}
	s := &Segment{From: r.uvarint(), To: r.uvarint()}
	n := r.uvarint()
	if r.err == nil && (s.From == 0 || s.To < s.From || n > s.To-s.From || n > uint64(len(b))) {
		return nil, fmt.Errorf("%w: range [%d, %d) with %d messages", ErrCorrupt, s.From, s.To, n)
	}
	if r.err != nil {
		return nil, r.err
	}
	s.Msgs = make([]Msg, n)
	prev := s.From - 1
	for i := range s.Msgs {
		m := &s.Msgs[i]
		d := r.uvarint()
		m.Seq = prev + d
		if r.err == nil && (d == 0 || d >= s.To-prev) { // no wrap past To
			return nil, fmt.Errorf("%w: message %d at sequence %d, outside [%d, %d) or out of order", ErrCorrupt, i, m.Seq, s.From, s.To)
		}
		prev = m.Seq
		m.Time = time.Unix(0, r.varint())
		m.Subject = string(r.bytes())
		if keys := r.uvarint(); keys > 0 && r.err == nil {
			if keys > uint64(len(r.b)) {
				return nil, fmt.Errorf("%w: %d header keys", ErrCorrupt, keys)
			}
			m.Header = make(nats.Header, keys)
			for range keys {
				k := string(r.bytes())
				nv := r.uvarint()
				if nv > uint64(len(r.b)) {
					return nil, fmt.Errorf("%w: %d values of header %q", ErrCorrupt, nv, k)
				}
				vs := make([]string, nv)
				for j := range vs {
					vs[j] = string(r.bytes())
				}
				m.Header[k] = vs
			}
		}
		if m.Data = r.bytes(); copyData {
			m.Data = slices.Clone(m.Data)
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last message", ErrCorrupt, len(r.b))
	}
	return s, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s cut short", ErrCorrupt, what)
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail("version")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("integer")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("integer")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("string")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
