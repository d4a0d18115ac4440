package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-dev/airlock/events"
)

// An op record is stored in a binary form of its own, not as JSON: the
// form is private to the store (every reader goes through Op, List and
// the batch), and without field names and with times as numbers a record
// is about half its JSON's size, which is that much less to copy into
// the memtable, flush and compact. Records an earlier version wrote as
// JSON (they begin with '{') are read as they are and rewritten in the
// binary form the next time their op changes.
//
// The form, after its version byte (opRecordV1):
//
//	uvarint  flags (the booleans, which optional times follow, and
//	         whether a result seq ends the record)
//	strings  id, workspace, state, agent, tool, class, fingerprint, args digest
//	uvarint  request seq
//	uvarint  count of operands, then each key and value (keys sorted)
//	strings  policy hash, reason, hold id
//	time     hold expires at (if flagged)
//	strings  approver, resolution
//	time     resolved at (if flagged)
//	strings  rule, attempt
//	varint   attempts
//	strings  instance, host
//	time     claimed at (if flagged)
//	string   result digest
//	varint   result bytes
//	time     result kept until (if flagged)
//	strings  result erased, error code, error
//	uvarint  version, first seq
//	time     created at, updated at
//	uvarint  result seq (if flagged)
//
// A string is a uvarint length and its bytes; a time is a varint of Unix
// seconds, a uvarint of nanoseconds and a varint of the zone's offset in
// seconds, which is all of a time its JSON (RFC 3339) carries. A new field
// of events.Op needs a new version, or a flag and a place at the end (as
// the result seq has: a version that does not know the flag refuses the
// record, as it would a new version); TestOpRecordRoundTrip fails until
// the form has it.
const opRecordV1 = 0x01

// Flags of an op record.
const (
	recHoldExpiresAt = 1 << iota
	recResolvedAt
	recClaimedAt
	recResultKeptUntil
	recStarted
	recResultEraseOnDelivery
	recScrubbed
	recResultSeq

	recKnownFlags = recResultSeq<<1 - 1
)

// appendOpRecord appends op's record to b. It refuses, as the op's JSON
// would, a time outside the years 0-9999 or with a zone offset of a day
// or more: a record that could be written but not read back or shown.
func appendOpRecord(b []byte, op *events.Op) ([]byte, error) {
	var flags uint64
	set := func(flag uint64, on bool) {
		if on {
			flags |= flag
		}
	}
	set(recHoldExpiresAt, op.HoldExpiresAt != nil)
	set(recResolvedAt, op.ResolvedAt != nil)
	set(recClaimedAt, op.ClaimedAt != nil)
	set(recResultKeptUntil, op.ResultKeptUntil != nil)
	set(recStarted, op.Started)
	set(recResultEraseOnDelivery, op.ResultEraseOnDelivery)
	set(recScrubbed, op.Scrubbed)
	set(recResultSeq, op.ResultSeq != 0)
	for _, t := range []*time.Time{op.HoldExpiresAt, op.ResolvedAt, op.ClaimedAt, op.ResultKeptUntil, &op.CreatedAt, &op.UpdatedAt} {
		if t == nil {
			continue
		}
		if _, offset := t.Zone(); t.Year() < 0 || t.Year() > 9999 || offset <= -24*3600 || offset >= 24*3600 {
			return nil, fmt.Errorf("op %s: time %s cannot be stored", op.ID, t)
		}
	}
	b = append(b, opRecordV1)
	b = binary.AppendUvarint(b, flags)
	b = appendStrings(b, op.ID, op.Workspace, string(op.State), op.Agent, op.Tool, op.Class, op.Fingerprint, op.ArgsDigest)
	b = binary.AppendUvarint(b, op.RequestSeq)
	b = binary.AppendUvarint(b, uint64(len(op.Operands)))
	if len(op.Operands) > 0 {
		keys := make([]string, 0, len(op.Operands))
		for k := range op.Operands {
			keys = append(keys, k)
		}
		slices.Sort(keys) // the same op, the same bytes
		for _, k := range keys {
			b = appendStrings(b, k, op.Operands[k])
		}
	}
	b = appendStrings(b, op.PolicyHash, op.Reason, op.HoldID)
	b = appendTimeOpt(b, op.HoldExpiresAt)
	b = appendStrings(b, op.Approver, op.Resolution)
	b = appendTimeOpt(b, op.ResolvedAt)
	b = appendStrings(b, op.Rule, op.Attempt)
	b = binary.AppendVarint(b, int64(op.Attempts))
	b = appendStrings(b, op.Instance, op.Host)
	b = appendTimeOpt(b, op.ClaimedAt)
	b = appendStrings(b, op.ResultDigest)
	b = binary.AppendVarint(b, int64(op.ResultBytes))
	b = appendTimeOpt(b, op.ResultKeptUntil)
	b = appendStrings(b, op.ResultErased, string(op.ErrorCode), op.Error)
	b = binary.AppendUvarint(b, op.Version)
	b = binary.AppendUvarint(b, op.FirstSeq)
	b = appendTime(b, op.CreatedAt)
	b = appendTime(b, op.UpdatedAt)
	if op.ResultSeq != 0 {
		b = binary.AppendUvarint(b, op.ResultSeq)
	}
	return b, nil
}

func appendStrings(b []byte, ss ...string) []byte {
	for _, s := range ss {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func appendTime(b []byte, t time.Time) []byte {
	_, offset := t.Zone()
	b = binary.AppendVarint(b, t.Unix())
	b = binary.AppendUvarint(b, uint64(t.Nanosecond()))
	return binary.AppendVarint(b, int64(offset))
}

func appendTimeOpt(b []byte, t *time.Time) []byte {
	if t == nil {
		return b // its flag says so
	}
	return appendTime(b, *t)
}

// errOpRecord is the error of a record that does not decode.
var errOpRecord = errors.New("op record does not decode")

// decodeOpRecord reads a stored op record, binary or (written by an
// earlier version) JSON, into op, which must be zero.
func decodeOpRecord(v []byte, op *events.Op) error {
	if len(v) > 0 && v[0] == '{' {
		return events.UnmarshalJSON(v, op)
	}
	if len(v) == 0 || v[0] != opRecordV1 {
		return fmt.Errorf("%w: unknown form %q", errOpRecord, v[:min(len(v), 1)])
	}
	// One string for every string field: they are slices of it.
	r := recReader{s: string(v[1:])}
	flags := r.uvarint()
	var state, errorCode string
	r.strings(&op.ID, &op.Workspace, &state, &op.Agent, &op.Tool, &op.Class, &op.Fingerprint, &op.ArgsDigest)
	op.State = events.State(state)
	op.RequestSeq = r.uvarint()
	if n := r.uvarint(); n > 0 && r.err == nil {
		if n > uint64(len(r.s))/2 { // each pair takes two bytes at least
			return fmt.Errorf("%w: %d operands in %d bytes", errOpRecord, n, len(r.s))
		}
		op.Operands = make(map[string]string, n)
		for range n {
			var k, v string
			r.strings(&k, &v)
			op.Operands[k] = v
		}
	}
	r.strings(&op.PolicyHash, &op.Reason, &op.HoldID)
	op.HoldExpiresAt = r.timeOpt(flags&recHoldExpiresAt != 0)
	r.strings(&op.Approver, &op.Resolution)
	op.ResolvedAt = r.timeOpt(flags&recResolvedAt != 0)
	r.strings(&op.Rule, &op.Attempt)
	op.Attempts = int(r.varint())
	r.strings(&op.Instance, &op.Host)
	op.ClaimedAt = r.timeOpt(flags&recClaimedAt != 0)
	r.strings(&op.ResultDigest)
	op.ResultBytes = int(r.varint())
	op.ResultKeptUntil = r.timeOpt(flags&recResultKeptUntil != 0)
	r.strings(&op.ResultErased, &errorCode, &op.Error)
	op.ErrorCode = events.Code(errorCode)
	op.Version = r.uvarint()
	op.FirstSeq = r.uvarint()
	op.CreatedAt = r.time()
	op.UpdatedAt = r.time()
	if flags&recResultSeq != 0 {
		op.ResultSeq = r.uvarint()
	}
	op.Started = flags&recStarted != 0
	op.ResultEraseOnDelivery = flags&recResultEraseOnDelivery != 0
	op.Scrubbed = flags&recScrubbed != 0
	switch {
	case r.err != nil:
		return r.err
	case len(r.s) != 0:
		return fmt.Errorf("%w: %d bytes left over", errOpRecord, len(r.s))
	case flags&^recKnownFlags != 0:
		return fmt.Errorf("%w: unknown flags %#x", errOpRecord, flags)
	}
	return nil
}

// recReader reads an op record's fields from s; the first failure sticks
// in err, and every read after it returns zero.
type recReader struct {
	s   string
	err error
}

func (r *recReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s cut short", errOpRecord, what)
	}
	r.s = ""
}

func (r *recReader) uvarint() uint64 {
	var x uint64
	var shift uint
	for i := 0; i < len(r.s) && i < binary.MaxVarintLen64; i++ {
		c := r.s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				break // overflows 64 bits
			}
			r.s = r.s[i+1:]
			return x | uint64(c)<<shift
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	r.fail("a number")
	return 0
}

func (r *recReader) varint() int64 {
	ux := r.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (r *recReader) strings(ps ...*string) {
	for _, p := range ps {
		n := r.uvarint()
		if n > uint64(len(r.s)) {
			r.fail("a string")
			return
		}
		*p, r.s = r.s[:n], r.s[n:]
	}
}

func (r *recReader) time() time.Time {
	sec, nsec, offset := r.varint(), r.uvarint(), r.varint()
	if r.err != nil {
		return time.Time{}
	}
	if nsec >= 1e9 || offset <= -24*3600 || offset >= 24*3600 {
		r.fail("a time")
		return time.Time{}
	}
	t := time.Unix(sec, int64(nsec))
	if offset == 0 {
		return t.UTC()
	}
	return t.In(time.FixedZone("", int(offset)))
}

func (r *recReader) timeOpt(present bool) *time.Time {
	if !present {
		return nil
	}
	t := r.time()
	return &t
}
