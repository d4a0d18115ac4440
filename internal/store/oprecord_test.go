package store

import (
	"encoding/hex"
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

		rec, err := appendOpRecord(nil, op)
		require.NoError(t, err)
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
		again, err := appendOpRecord(nil, got)
		require.NoError(t, err)
		require.Equal(t, rec, again)
	}
}

// goldenOp is an op with every field set, and goldenV1 its record in
// form 1, as stores hold it: the form may never change under the same
// version byte, or the records already stored would read wrong.
var goldenOp = func() *events.Op {
	at := time.Date(2026, 12, 6, 1, 2, 3, 456789000, time.UTC)
	plus := time.Date(2026, 12, 6, 3, 2, 3, 0, time.FixedZone("", 2*3600))
	kept := at.Add(24 * time.Hour)
	return &events.Op{
		ID: "op1", Workspace: "ws", State: events.StateCompleted, Agent: "ag", Tool: "echo", Class: "read",
		Fingerprint: "fp", ArgsDigest: "ad", RequestSeq: 300, Operands: map[string]string{"k2": "v2", "k1": "v1"},
		PolicyHash: "ph", Reason: "why", HoldID: "h1", HoldExpiresAt: &plus, Approver: "ann", Resolution: "granted",
		ResolvedAt: &at, Rule: "r", Attempt: "at1", Attempts: -2, Started: true, Instance: "in", Host: "ho",
		ClaimedAt: &at, ResultDigest: "rd", ResultBytes: 42, ResultKeptUntil: &kept, ResultEraseOnDelivery: true,
		ResultErased: "expired", ErrorCode: "E", Error: "err", Scrubbed: true, Version: 1 << 40, FirstSeq: 299,
		CreatedAt: time.Time{}, UpdatedAt: at,
	}
}()

const goldenV1 = "017f" + // version 1, every flag
	"036f7031" + "027773" + "09636f6d706c65746564" + "026167" + "046563686f" + "0472656164" + "026670" + "026164" + // op1 ws completed ag echo read fp ad
	"ac02" + "02" + "026b3102763102" + "6b32027632" + // request seq 300; operands k1=v1, k2=v2
	"027068" + "03776879" + "026831" + "96d0a5b10d" + "00" + "c070" + // ph why h1; hold expires: seconds, 0 ns, +02:00
	"03616e6e" + "076772616e746564" + "96d0a5b10d" + "8898e8d901" + "00" + // ann granted; resolved at (UTC)
	"0172" + "03617431" + "03" + "02696e" + "02686f" + "96d0a5b10d8898e8d90100" + // r at1 attempts -2 in ho; claimed at
	"027264" + "54" + "9696b0b10d8898e8d90100" + // rd, 42 bytes, kept until
	"0765787069726564" + "0145" + "03657272" + // expired E err
	"808080808020" + "ab02" + // version 1<<40, first seq 299
	"ffdb8ff9ce030000" + "96d0a5b10d8898e8d90100" // created at (the zero time), updated at

// The form of version 1 is fixed.
func TestOpRecordV1IsFixed(t *testing.T) {
	rec, err := appendOpRecord(nil, goldenOp)
	require.NoError(t, err)
	require.Equal(t, goldenV1, hex.EncodeToString(rec), "form 1 changed: records already stored would read wrong; add a version instead")
	want, err := events.MarshalJSON(goldenOp)
	require.NoError(t, err)
	b, err := hex.DecodeString(goldenV1)
	require.NoError(t, err)
	got := new(events.Op)
	require.NoError(t, decodeOpRecord(b, got))
	gotJSON, err := events.MarshalJSON(got)
	require.NoError(t, err)
	require.Equal(t, string(want), string(gotJSON))
}

// An op whose completed event named its result's sequence has it at the
// end of its record, behind a flag of its own: the form of version 1
// otherwise, so every record written before reads as it did.
func TestOpRecordResultSeqIsFlaggedAtTheEnd(t *testing.T) {
	op := *goldenOp
	op.ResultSeq = 300
	rec, err := appendOpRecord(nil, &op)
	require.NoError(t, err)
	want := "01" + "ff01" + goldenV1[4:] + "ac02" // every flag and result seq's; result seq 300
	require.Equal(t, want, hex.EncodeToString(rec))
	got := new(events.Op)
	require.NoError(t, decodeOpRecord(rec, got))
	assert.Equal(t, uint64(300), got.ResultSeq)
	// Without its flag, the trailing seq is bytes left over: refused.
	b, err := hex.DecodeString("017f" + goldenV1[4:] + "ac02")
	require.NoError(t, err)
	require.ErrorIs(t, decodeOpRecord(b, new(events.Op)), errOpRecord)
}

// A record as the JSON store wrote it (before 2026-12-06) reads.
func TestOpRecordEarlierJSON(t *testing.T) {
	const earlier = `{"op_id":"op_9","workspace":"demo","state":"completed","agent":"agent","tool":"echo","class":"read",` +
		`"fingerprint":"sha256:aa","args_digest":"sha256:bb","request_seq":12,"policy_hash":"sha256:cc","reason":"allowed",` +
		`"rule":"echo","attempt":"A1","attempts":1,"started":true,"instance":"i1","host":"h1","claimed_at":"2026-12-05T10:00:00.5Z",` +
		`"result_digest":"sha256:dd","result_bytes":7,"result_kept_until":"2026-12-06T10:00:00.5Z","version":14,"first_seq":13,` +
		`"created_at":"2026-12-05T10:00:00.5Z","updated_at":"2026-12-05T10:00:00.6Z"}`
	op := new(events.Op)
	require.NoError(t, decodeOpRecord([]byte(earlier), op))
	assert.Equal(t, "op_9", op.ID)
	assert.Equal(t, events.StateCompleted, op.State)
	assert.Equal(t, uint64(12), op.RequestSeq)
	assert.Equal(t, uint64(14), op.Version)
	assert.True(t, op.Started)
	assert.Equal(t, time.Date(2026, 12, 6, 10, 0, 0, 5e8, time.UTC), *op.ResultKeptUntil)
	rec, err := appendOpRecord(nil, op)
	require.NoError(t, err)
	back := new(events.Op)
	require.NoError(t, decodeOpRecord(rec, back))
	js, err := events.MarshalJSON(back)
	require.NoError(t, err)
	assert.JSONEq(t, earlier, string(js))
}

// A time the op's JSON could not carry is refused when the record is
// written, as the JSON store refused it, rather than stored unreadable.
func TestOpRecordRefusesTimesJSONCannotCarry(t *testing.T) {
	for _, tt := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 25*3600)),
	} {
		op := &events.Op{ID: "op1", CreatedAt: tt}
		_, err := appendOpRecord(nil, op)
		assert.Error(t, err, "%s", tt)
		_, err = events.MarshalJSON(op)
		assert.Error(t, err, "JSON refuses it too")
	}
}

// A record cut short, grown or changed fails to decode with an error; it
// never panics.
func TestOpRecordDamaged(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	op := randomOp(t, r, true)
	rec, err := appendOpRecord(nil, op)
	require.NoError(t, err)
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
	rec, err := appendOpRecord(nil, op)
	require.NoError(t, err)
	t.Logf("JSON %d bytes, record %d bytes", len(js), len(rec))
	assert.Less(t, float64(len(rec)), 0.7*float64(len(js)))
}
