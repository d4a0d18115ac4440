package archive_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sample() *archive.Segment {
	at := time.Unix(0, 1_796_000_000_123_456_789)
	return &archive.Segment{From: 7, To: 13, Msgs: []archive.Msg{
		{Seq: 7, Time: at, Subject: "airlock.v1.op.ws.op1.echo.started", Header: nats.Header{"Ce-Type": {"started"}, "Nats-Expected-Last-Subject-Sequence": {"0"}}, Data: []byte(`{"a":1}`)},
		// A gap: 8 and 9 were never stored in this range's stream.
		{Seq: 10, Time: at.Add(time.Millisecond), Subject: "airlock.v1.sys.policy", Data: nil},
		{Seq: 12, Time: at.Add(2 * time.Millisecond), Subject: "airlock.v1.op.ws.op1.echo.completed", Header: nats.Header{"Multi": {"a", "b", ""}}, Data: []byte{0, 1, 2}},
	}}
}

func TestSegmentRoundTrips(t *testing.T) {
	s := sample()
	b := s.Encode(nil)
	got, err := archive.Decode(b)
	require.NoError(t, err)
	assert.Equal(t, s.From, got.From)
	assert.Equal(t, s.To, got.To)
	require.Len(t, got.Msgs, 3)
	for i, m := range s.Msgs {
		g := got.Msgs[i]
		assert.Equal(t, m.Seq, g.Seq)
		assert.True(t, m.Time.Equal(g.Time), "time %d", i)
		assert.Equal(t, m.Time.UnixNano(), g.Time.UnixNano())
		assert.Equal(t, m.Subject, g.Subject)
		if len(m.Header) == 0 {
			assert.Empty(t, g.Header)
		} else {
			assert.Equal(t, m.Header, g.Header)
		}
		assert.Equal(t, len(m.Data), len(g.Data))
		if len(m.Data) > 0 {
			assert.Equal(t, m.Data, g.Data)
		}
	}
	// The data are copies: the encoding may be reused.
	clear(b)
	assert.Equal(t, []byte{0, 1, 2}, got.Msgs[2].Data)
	// Headers are written in one order whatever the map's.
	assert.Equal(t, s.Encode(nil), sample().Encode(nil))
}

// A segment cut short anywhere, or with a byte changed in its framing,
// is an error, never a panic or a segment.
func TestSegmentCutShortOrDamagedIsAnError(t *testing.T) {
	b := sample().Encode(nil)
	for i := range len(b) {
		_, err := archive.Decode(b[:i])
		require.Error(t, err, "cut at %d", i)
		assert.True(t, errors.Is(err, archive.ErrCorrupt), "cut at %d: %v", i, err)
	}
	_, err := archive.Decode(append(b, 0))
	assert.ErrorIs(t, err, archive.ErrCorrupt, "a byte after the end")
	bad := append([]byte{}, b...)
	bad[0] = 3
	_, err = archive.Decode(bad)
	assert.ErrorContains(t, err, "upgrade Airlock")
	for i := 1; i < len(b); i++ {
		d := append([]byte{}, b...)
		d[i] ^= 0xff
		_, _ = archive.Decode(d) // must not panic
	}
	// Out of range and out of order.
	s := sample()
	s.Msgs[2].Seq = 13
	_, err = archive.Decode(s.Encode(nil))
	assert.ErrorIs(t, err, archive.ErrCorrupt)
}

// Segments stored by version 1, uncompressed, still decode, and cut
// short anywhere they are an error.
func TestSegmentOfVersion1Decodes(t *testing.T) {
	plain := archive.EncodePlain(sample())
	require.Equal(t, byte(1), plain[0])
	got, err := archive.Decode(plain)
	require.NoError(t, err)
	want, err := archive.Decode(sample().Encode(nil))
	require.NoError(t, err)
	assert.Equal(t, want, got)
	for i := range len(plain) {
		_, err := archive.Decode(plain[:i])
		assert.ErrorIs(t, err, archive.ErrCorrupt, "cut at %d", i)
	}
}

// A segment of op events is stored compressed: their headers and fields
// repeat from one event to the next.
func TestSegmentIsCompressed(t *testing.T) {
	at := time.Unix(0, 1_796_000_000_000_000_000)
	s := &archive.Segment{From: 1, To: 1001}
	for i := range 1000 {
		s.Msgs = append(s.Msgs, archive.Msg{
			Seq: uint64(i + 1), Time: at.Add(time.Duration(i) * 37 * time.Microsecond),
			Subject: fmt.Sprintf("airlock.v1.op.ws-1.op-%08d.echo.started", i),
			Header: nats.Header{"Ce-Specversion": {"1.0"}, "Ce-Type": {"dev.airlock.op.started.v1"}, "Ce-Source": {"airlock/runner"},
				"Ce-Id": {fmt.Sprintf("op-%08d-started", i)}, "Nats-Expected-Last-Subject-Sequence": {"0"}},
			Data: fmt.Appendf(nil, `{"op_id":"op-%08d","workspace":"ws-1","tool":"echo","attempt":1}`, i),
		})
	}
	plain := archive.EncodePlain(s)
	var e archive.Encoder
	enc := e.Encode(s)
	assert.Less(t, len(enc), len(plain)/3, "compressed %d bytes of %d", len(enc), len(plain))
	got, err := archive.Decode(enc)
	require.NoError(t, err)
	want, err := archive.Decode(plain)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	// The encoder's buffers are reused: the next segment's encoding is
	// its own, whatever the one before.
	again := e.Encode(sample())
	got, err = archive.Decode(again)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), got.From)
}

// A compressed body that says it is larger than MaxDecodedBytes is
// corrupt, not a 4 GiB allocation.
func TestSegmentTooLargeOnceDecompressedIsCorrupt(t *testing.T) {
	b := []byte{2}
	b = binary.AppendUvarint(b, archive.MaxDecodedBytes+1)
	b = append(b, bytes.Repeat([]byte{0}, 16)...)
	_, err := archive.Decode(b)
	assert.ErrorIs(t, err, archive.ErrCorrupt)
	assert.ErrorContains(t, err, "at most")
}

// A sequence step that wraps around past the range's end is corrupt, not a
// message below From.
func TestSegmentSequenceThatWrapsIsCorrupt(t *testing.T) {
	b := []byte{1}
	b = binary.AppendUvarint(b, 10) // From
	b = binary.AppendUvarint(b, 20) // To
	b = binary.AppendUvarint(b, 1)  // one message
	b = binary.AppendUvarint(b, ^uint64(0)-5)
	b = binary.AppendVarint(b, 0)  // time
	b = append(b, 1, 's')          // subject
	b = binary.AppendUvarint(b, 0) // no headers
	b = binary.AppendUvarint(b, 0) // no data
	_, err := archive.Decode(b)
	assert.ErrorIs(t, err, archive.ErrCorrupt)
}
