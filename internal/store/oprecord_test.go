package store

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomOp sets every field of an events.Op through reflection, each to
// its zero value now and then (or to a value whenever full), so that a
// field added to Op and not to the record's form fails the round trip.
func randomOp(t *testing.T, r *rand.Rand, full bool) *events.Op {
	op := new(events.Op)
	v := reflect.ValueOf(op).Elem()
	zones := []*time.Location{time.UTC, time.FixedZone("", 3600), time.FixedZone("", -(5*3600 + 30*60)), time.FixedZone("", 45)}
	someTime := func() time.Time {
		sec := r.Int64N(4_000_000_000) - 1_000_000_000
		if r.IntN(20) == 0 {
			return time.Time{} // year 1
		}
		return time.Unix(sec, r.Int64N(1e9)).In(zones[r.IntN(len(zones))])
	}
	someString := func() string {
		const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789:_-./ é\"\\\n"
		var b strings.Builder
		for range 1 + r.IntN(80) {
			b.WriteString(string([]rune(alphabet)[r.IntN(len([]rune(alphabet)))]))
		}
		return b.String()
	}
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !full && r.IntN(3) == 0 {
			continue // zero
		}
		switch {
		case f.Kind() == reflect.String:
			f.SetString(someString())
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.Int:
			f.SetInt(r.Int64N(1<<40) - 1<<39)
		case f.Kind() == reflect.Uint64:
			f.SetUint(r.Uint64() >> r.IntN(64))
		case f.Type() == reflect.TypeFor[time.Time]():
			f.Set(reflect.ValueOf(someTime()))
		case f.Type() == reflect.TypeFor[*time.Time]():
			tt := someTime()
			f.Set(reflect.ValueOf(&tt))
		case f.Type() == reflect.TypeFor[map[string]string]():
			m := map[string]string{}
			for range r.IntN(5) {
				m[someString()] = someString()
			}
			f.Set(reflect.ValueOf(m))
		default:
			t.Fatalf("events.Op.%s is a %s: teach the op record (oprecord.go) and this test about it", sf.Name, f.Type())
		}
	}
	return op
}

// Every op reads back from its record as the same op: the same JSON, so
// the same answer to every query, as when records were JSON.
func TestOpRecordRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		op := randomOp(t, r, i%10 == 0)
		want, err := events.MarshalJSON(op)
		require.NoError(t, err)

		rec := appendOpRecord(nil, op)
		require.Equal(t, byte(opRecordV1), rec[0])
		got := new(events.Op)
		require.NoError(t, decodeOpRecord(rec, got), "op %d", i)
		gotJSON, err := events.MarshalJSON(got)
		require.NoError(t, err)
		require.Equal(t, string(want), string(gotJSON), "op %d", i)
		for _, p := range []*time.Time{&got.CreatedAt, &got.UpdatedAt, got.HoldExpiresAt, got.ResolvedAt, got.ClaimedAt, got.ResultKeptUntil} {
			if p != nil && p.IsZero() {
				assert.Equal(t, time.Time{}, *p, "a zero time reads back as the zero time")
			}
		}
		// The same op, the same bytes (operands are a map).
		require.Equal(t, rec, appendOpRecord(nil, got))

		// A record of the earlier form, JSON, reads as it always did.
		old, viaJSON := new(events.Op), new(events.Op)
		require.NoError(t, decodeOpRecord(want, old))
		require.NoError(t, events.UnmarshalJSON(want, viaJSON))
		require.Equal(t, viaJSON, old)
	}
}

// A record cut short, grown or changed fails to decode with an error; it
// never panics.
func TestOpRecordDamaged(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	op := randomOp(t, r, true)
	rec := appendOpRecord(nil, op)
	for n := range len(rec) {
		err := decodeOpRecord(rec[:n], new(events.Op))
		require.Error(t, err, "cut to %d of %d bytes", n, len(rec))
	}
	assert.ErrorIs(t, decodeOpRecord(append(rec[:len(rec):len(rec)], 0), new(events.Op)), errOpRecord)
	assert.ErrorIs(t, decodeOpRecord(append([]byte{0x02}, rec[1:]...), new(events.Op)), errOpRecord)
	for range 20000 {
		b := append([]byte(nil), rec...)
		for range 1 + r.IntN(4) {
			b[r.IntN(len(b))] = byte(r.Uint32())
		}
		_ = decodeOpRecord(b, new(events.Op)) // no panic
	}
}

// A typical op's record is much smaller than its JSON.
func TestOpRecordSize(t *testing.T) {
	at := time.Date(2026, 12, 6, 1, 2, 3, 456789000, time.UTC)
	later := at.Add(30 * time.Millisecond)
	kept := at.Add(24 * time.Hour)
	op := &events.Op{
		ID: "op_" + strings.Repeat("7", 40), Workspace: "demo", State: events.StateCompleted,
		Agent: "agent", Tool: "echo", Class: "read", Fingerprint: "sha256:" + strings.Repeat("a", 64),
		ArgsDigest: "sha256:" + strings.Repeat("b", 64), RequestSeq: 123456, PolicyHash: "sha256:" + strings.Repeat("c", 64),
		Reason: "allowed by rule echo", Rule: "echo", Attempt: "Xz3Q9wJr5hT1LkPz2mVb8c", Attempts: 1, Started: true,
		Instance: "1673acdb10482c47", Host: "build-host", ClaimedAt: &at,
		ResultDigest: "sha256:" + strings.Repeat("d", 64), ResultBytes: 42, ResultKeptUntil: &kept,
		Version: 234567, FirstSeq: 234566, CreatedAt: at, UpdatedAt: later,
	}
	js, err := events.MarshalJSON(op)
	require.NoError(t, err)
	rec := appendOpRecord(nil, op)
	t.Logf("JSON %d bytes, record %d bytes", len(js), len(rec))
	assert.Less(t, float64(len(rec)), 0.7*float64(len(js)))
}
