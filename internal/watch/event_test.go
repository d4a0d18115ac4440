package watch_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/watch"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	opA = "op_0123456789abcdef0123456789abcdef"
	opB = "op_fedcba9876543210fedcba9876543210"
	// when is the ce-time of the events msg builds, set when they were
	// appended: never what watch shows, which is when they were stored.
	when = "2026-03-04T05:06:05.5Z"
	// storedStamp is when AIRLOCK_OPS stored them, as the server writes
	// it in Nats-Time-Stamp.
	storedStamp = "2026-03-04T05:06:07.089123Z"
)

var (
	received = time.Date(2026, 3, 4, 5, 6, 8, 0, time.UTC)
	stored   = time.Date(2026, 3, 4, 5, 6, 7, 89123000, time.UTC)
)

// ops numbers what republish stores, as AIRLOCK_OPS does: a sequence for
// the stream and the last sequence of each subject. It starts high so that
// a sequence is never a small number by chance.
var ops = struct {
	seq  uint64
	last map[string]uint64
}{seq: 1000, last: map[string]uint64{}}

// republish is m as the server republishes it once AIRLOCK_OPS stored it
// as its next message: on the live subject of m's subject, with m's
// headers and the stream's (named here by hand, not by the constants the
// code uses). It returns the message and its sequence.
func republish(m *nats.Msg) (*nats.Msg, uint64) {
	ops.seq++
	h := nats.Header{}
	for k, v := range m.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set("Nats-Stream", "AIRLOCK_OPS")
	h.Set("Nats-Subject", m.Subject)
	h.Set("Nats-Sequence", strconv.FormatUint(ops.seq, 10))
	h.Set("Nats-Time-Stamp", storedStamp)
	h.Set("Nats-Last-Sequence", strconv.FormatUint(ops.last[m.Subject], 10))
	ops.last[m.Subject] = ops.seq
	return &nats.Msg{Subject: events.LiveSubject(m.Subject), Header: h, Data: m.Data}, ops.seq
}

// appended is an event of type t with data as Airlock appends it on
// subject, with ce-time when.
func appended(t *testing.T, subject string, typ events.Type, data any) *nats.Msg {
	t.Helper()
	ev, err := events.NewEvent(typ, "airlock/test", "", data)
	require.NoError(t, err)
	m := events.Encode(subject, ev)
	m.Header.Set(events.HeaderPrefix+"time", when)
	return m
}

// msg is an event of type t with data, appended on subject, as watchers
// receive it once stored: republished.
func msg(t *testing.T, subject string, typ events.Type, data any) *nats.Msg {
	t.Helper()
	m, _ := republish(appended(t, subject, typ, data))
	return m
}

func hdr(ws, op string) events.OpHeader { return events.OpHeader{OpID: op, Workspace: ws} }

func TestDecodeEveryKind(t *testing.T) {
	exp := time.Date(2026, 3, 4, 5, 16, 7, 0, time.UTC)
	sum := &events.Summary{Agent: "agent", Tool: "echo"}
	ms, n := int64(12), 17
	for _, tc := range []struct {
		name    string
		subject string
		typ     events.Type
		data    any
		want    watch.Event
		line    string
	}{
		{name: "decided", subject: events.OpEventSubject("demo", opA, "echo", events.TypeDecided), typ: events.TypeDecided,
			data: &events.Decided{OpHeader: hdr("demo", opA), Request: sum, Reason: "mode auto allows read", Mode: "auto"},
			want: watch.Event{Kind: "decided", State: events.StateReady, Agent: "agent", Mode: "auto", Reason: "mode auto allows read"},
			line: `2026-03-04T05:06:07.089Z demo         ` + opA + ` echo         decided       agent=agent mode=auto reason="mode auto allows read"`},
		{name: "held", subject: events.OpEventSubject("demo", opA, "echo", events.TypeHeld), typ: events.TypeHeld,
			data: &events.Held{OpHeader: hdr("demo", opA), Request: sum, HoldID: events.HoldID(opA), ExpiresAt: exp, Reason: "big", Rule: "hold-big"},
			want: watch.Event{Kind: "held", State: events.StateHeld, Agent: "agent", HoldID: events.HoldID(opA), ExpiresAt: &exp, Reason: "big", Rule: "hold-big"},
			line: `2026-03-04T05:06:07.089Z demo         ` + opA + ` echo         held          hold=` + events.HoldID(opA) + ` agent=agent rule=hold-big expires=2026-03-04T05:16:07.000Z reason=big`},
		{name: "granted", subject: events.OpEventSubject("demo", opA, "echo", events.TypeGranted), typ: events.TypeGranted,
			data: &events.Granted{OpHeader: hdr("demo", opA), HoldID: events.HoldID(opA), Approver: "approver", Reason: "ok"},
			want: watch.Event{Kind: "granted", State: events.StateGranted, HoldID: events.HoldID(opA), Approver: "approver", Reason: "ok"}},
		{name: "denied by an approver", subject: events.OpEventSubject("demo", opA, "echo", events.TypeDenied), typ: events.TypeDenied,
			data: &events.Denied{OpHeader: hdr("demo", opA), Code: events.CodeApprovalDenied, Reason: "too big", Actor: "approver", HoldID: events.HoldID(opA)},
			want: watch.Event{Kind: "denied", State: events.StateDenied, Code: events.CodeApprovalDenied, Reason: "too big", Approver: "approver", HoldID: events.HoldID(opA)}},
		{name: "expired", subject: events.OpEventSubject("demo", opA, "echo", events.TypeExpired), typ: events.TypeExpired,
			data: &events.Expired{OpHeader: hdr("demo", opA), HoldID: events.HoldID(opA)},
			want: watch.Event{Kind: "expired", State: events.StateExpired, Code: events.CodeHoldExpired, HoldID: events.HoldID(opA)}},
		{name: "claimed", subject: events.OpEventSubject("demo", opA, "echo", events.TypeClaimed), typ: events.TypeClaimed,
			data: &events.Claimed{OpHeader: hdr("demo", opA), Attempt: "att2", Claim: events.Claim{Recovers: "att1", Executor: "echo", Runner: "r1"}},
			want: watch.Event{Kind: "claimed", State: events.StateExecuting, Attempt: "att2", Recovers: "att1"}},
		{name: "started, claiming", subject: events.OpEventSubject("demo", opA, "echo", events.TypeStarted), typ: events.TypeStarted,
			data: &events.Started{OpHeader: hdr("demo", opA), Attempt: "att3", Claim: &events.Claim{Recovers: "att2", Executor: "echo", Runner: "r1"}},
			want: watch.Event{Kind: "started", State: events.StateExecuting, Attempt: "att3", Recovers: "att2"}},
		{name: "completed", subject: events.OpEventSubject("demo", opA, "echo", events.TypeCompleted), typ: events.TypeCompleted,
			data: &events.Completed{OpHeader: hdr("demo", opA), Attempt: "att2", ResultDigest: "sha256:00", ResultBytes: n, DurationMS: ms},
			want: watch.Event{Kind: "completed", State: events.StateCompleted, Attempt: "att2", ResultDigest: "sha256:00", ResultBytes: &n, DurationMS: &ms},
			line: `2026-03-04T05:06:07.089Z demo         ` + opA + ` echo         completed     attempt=att2 duration=12ms result_bytes=17`},
		{name: "failed", subject: events.OpEventSubject("demo", opA, "echo", events.TypeFailed), typ: events.TypeFailed,
			data: &events.Failed{OpHeader: hdr("demo", opA), Attempt: "att2", Code: events.CodeExecutorFailed, Message: "exit 1"},
			want: watch.Event{Kind: "failed", State: events.StateFailed, Attempt: "att2", Code: events.CodeExecutorFailed, Message: "exit 1"}},
		{name: "ambiguous", subject: events.OpEventSubject("demo", opA, "echo", events.TypeAmbiguous), typ: events.TypeAmbiguous,
			data: &events.Ambiguous{OpHeader: hdr("demo", opA), Attempt: "att1", Code: events.CodeAmbiguous, Known: "sent"},
			want: watch.Event{Kind: "ambiguous", State: events.StateAmbiguous, Attempt: "att1", Code: events.CodeAmbiguous, Message: "sent"}},
		{name: "scrubbed", subject: events.OpEventSubject("demo", opA, "echo", events.TypeScrubbed), typ: events.TypeScrubbed,
			data: &events.Scrubbed{OpHeader: hdr("demo", opA), RequestSeq: 9},
			want: watch.Event{Kind: "scrubbed", RequestSeq: 9}},
		{name: "rejected", subject: events.RejectedSubject("demo"), typ: events.TypeRejected,
			data: &events.Rejected{Code: events.CodeInvalidEvent, Message: "not a CloudEvent", Subject: "airlock.v1.req.demo.agent", RequestSeq: 5, Size: 8, Digest: "sha256:11"},
			want: watch.Event{Kind: watch.Rejected, Code: events.CodeInvalidEvent, Message: "not a CloudEvent", RequestSubject: "airlock.v1.req.demo.agent", RequestSeq: 5, Size: &[]int{8}[0]},
			line: `2026-03-04T05:06:07.089Z demo         -                                   -            rejected      code=INVALID_EVENT request=airlock.v1.req.demo.agent size=8 message="not a CloudEvent"`},
		{name: "rejected without a workspace", subject: events.RejectedSubject(events.NoWorkspace), typ: events.TypeRejected,
			data: &events.Rejected{Code: events.CodeInvalidName, Subject: "airlock.v1.req.BAD.agent"},
			want: watch.Event{Kind: watch.Rejected, Code: events.CodeInvalidName, RequestSubject: "airlock.v1.req.BAD.agent", Size: &[]int{0}[0]}},
		{name: "mode set", subject: events.ModeSubject("demo"), typ: events.TypeModeSet,
			data: &events.ModeSet{Workspace: "demo", Mode: "locked", Actor: "operator", Reason: "incident 42"},
			want: watch.Event{Kind: watch.ModeSet, Mode: "locked", Actor: "operator", Reason: "incident 42"},
			line: `2026-03-04T05:06:07.089Z demo         -                                   -            mode.set      actor=operator mode=locked reason="incident 42"`},
		{name: "mode cleared", subject: events.ModeSubject("demo"), typ: events.TypeModeSet,
			data: &events.ModeSet{Workspace: "demo", Actor: "operator", Reason: "over"},
			want: watch.Event{Kind: watch.ModeSet, Mode: "cleared", Actor: "operator", Reason: "over"}},
		{name: "policy loaded", subject: events.PolicySubject, typ: events.TypePolicyLoaded,
			data: &events.PolicyLoaded{Hash: "sha256:aa", PreviousHash: "sha256:bb", Source: "/etc/airlock/policy.yaml", Warnings: []string{"x"}},
			want: watch.Event{Kind: watch.PolicyLoaded, Hash: "sha256:aa", PreviousHash: "sha256:bb", Source: "/etc/airlock/policy.yaml", Warnings: 1},
			line: `2026-03-04T05:06:07.089Z -            -                                   -            policy.loaded hash=sha256:aa previous=sha256:bb source=/etc/airlock/policy.yaml warnings=1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, seq := republish(appended(t, tc.subject, tc.typ, tc.data))
			require.Equal(t, events.LiveSubject(tc.subject), m.Subject)
			gotSeq, gotSubject, gotStored, ok := watch.Republished(m.Header)
			require.True(t, ok, "stored and republished")
			assert.Equal(t, seq, gotSeq)
			assert.Equal(t, tc.subject, gotSubject)
			assert.Equal(t, stored, gotStored)
			got := watch.Decode(m.Subject, m.Header, m.Data, received)
			want := tc.want
			// When it was stored, not its ce-time nor when it arrived;
			// and the subject it was stored on.
			want.Time, want.Seq = stored, seq
			want.Type, want.Subject = tc.typ, tc.subject
			if _, op, tool, _, ok := events.OpSubjectParts(tc.subject); ok {
				want.Workspace, want.OpID, want.Tool = "demo", op, tool
			} else if tc.typ != events.TypePolicyLoaded {
				want.Workspace = tc.subject[strings.LastIndexByte(tc.subject, '.')+1:]
			}
			assert.Equal(t, want, got)
			if tc.line != "" {
				assert.Equal(t, tc.line, watch.Line(got))
			}
			assert.Equal(t, want.State.Terminal() || want.Kind == watch.Rejected, got.Terminal())
		})
	}
}

func TestDecodeUndecodable(t *testing.T) {
	opSubject := events.OpEventSubject("demo", opA, "echo", events.TypeCompleted)
	completed := func(ws, op string) any {
		return &events.Completed{OpHeader: hdr(ws, op), Attempt: "a", ResultDigest: "sha256:00"}
	}
	// kept is m republished once AIRLOCK_OPS stored it.
	kept := func(m *nats.Msg) *nats.Msg {
		r, _ := republish(m)
		return r
	}
	// copyOf is the valid completed event of opA as a direct get sends it
	// to the reply a client named, the live subject of the event's own:
	// the stream's headers, without those of a republished message.
	copyOf := func(extra map[string]string) *nats.Msg {
		m := appended(t, opSubject, events.TypeCompleted, completed("demo", opA))
		m.Subject = events.LiveSubject(opSubject)
		m.Header.Set("Nats-Stream", "AIRLOCK_OPS")
		m.Header.Set("Nats-Subject", opSubject)
		m.Header.Set("Nats-Sequence", "7")
		m.Header.Set("Nats-Time-Stamp", storedStamp)
		for k, v := range extra {
			m.Header.Set(k, v)
		}
		return m
	}
	// tampered is the valid completed event of opA as republished, with
	// its headers changed by change.
	tampered := func(change func(nats.Header)) *nats.Msg {
		m := msg(t, opSubject, events.TypeCompleted, completed("demo", opA))
		change(m.Header)
		return m
	}
	// misrouted is a valid republished event of opA delivered on live.
	misrouted := func(subject, live string) *nats.Msg {
		m := msg(t, subject, events.TypeCompleted, completed("demo", opA))
		m.Subject = live
		return m
	}
	const notStored = "not a message AIRLOCK_OPS stored"
	for _, tc := range []struct {
		name string
		m    *nats.Msg
		// forged: not a message AIRLOCK_OPS stored, or not on its live
		// subject; republished: Republished takes its headers for the
		// server's all the same (a message on another live subject).
		forged, republished bool
		ws, op              string // the columns the stored subject fills
		tool                string
		errPart             string
	}{
		// Stored, as the stream stores whatever the service publishes on
		// its subjects, but not a valid event for its subject.
		{name: "no headers", m: kept(&nats.Msg{Subject: opSubject, Data: []byte("not an event")}),
			ws: "demo", op: opA, tool: "echo", errPart: "not a CloudEvent"},
		{name: "data that does not decode", m: func() *nats.Msg {
			m := appended(t, opSubject, events.TypeCompleted, completed("demo", opA))
			m.Data = []byte(`{"result_bytes":"many"}`)
			return kept(m)
		}(), ws: "demo", op: opA, tool: "echo", errPart: "completed data"},
		{name: "an unknown type", m: func() *nats.Msg {
			m := appended(t, opSubject, events.TypeCompleted, completed("demo", opA))
			m.Header.Set(events.HeaderPrefix+"type", "dev.airlock.op.teleported.v1")
			return kept(m)
		}(), ws: "demo", op: opA, tool: "echo", errPart: "UNKNOWN_EVENT_TYPE"},
		{name: "another op's event", m: msg(t, opSubject, events.TypeCompleted, completed("demo", opB)),
			ws: "demo", op: opA, tool: "echo", errPart: "on another subject"},
		{name: "another workspace's event", m: msg(t, opSubject, events.TypeCompleted, completed("prod", opA)),
			ws: "demo", op: opA, tool: "echo", errPart: "on another subject"},
		{name: "another verb", m: msg(t, events.OpEventSubject("demo", opA, "echo", events.TypeClaimed), events.TypeCompleted, completed("demo", opA)),
			ws: "demo", op: opA, tool: "echo", errPart: "on another subject"},
		{name: "a request on an op subject", m: msg(t, opSubject, events.TypeRequested, &events.Request{Workspace: "demo"}),
			ws: "demo", op: opA, tool: "echo", errPart: "a requested event on"},
		{name: "a rejection on a mode subject", m: msg(t, events.ModeSubject("demo"), events.TypeRejected, &events.Rejected{Code: events.CodeInvalidEvent}),
			ws: "demo", errPart: "a rejected event on"},
		{name: "another workspace's mode", m: msg(t, events.ModeSubject("demo"), events.TypeModeSet, &events.ModeSet{Workspace: "prod", Mode: "locked"}),
			ws: "demo", errPart: "a set event on"},
		{name: "a policy on a mode subject", m: msg(t, events.ModeSubject("demo"), events.TypePolicyLoaded, &events.PolicyLoaded{Hash: "h"}),
			ws: "demo", errPart: "a loaded event on"},
		{name: "escapes in the subject", m: kept(&nats.Msg{Subject: "airlock.v1.op.\x1b[2J.op_x.echo.completed", Data: []byte("\x1b[31m")}),
			errPart: "not a CloudEvent"},
		{name: "a bad op id", m: msg(t, "airlock.v1.op.demo.op_x.echo.completed", events.TypeCompleted, completed("demo", "op_x")),
			ws: "", errPart: "on another subject"},

		// Not stored: what a client aims at a live subject by naming it
		// as its reply, and what anyone else publishes there.
		{name: "a query answer", m: &nats.Msg{Subject: events.LiveSubject(events.RejectedSubject("demo")), Data: []byte(`{"ops":[]}`)},
			forged: true, errPart: notStored},
		{name: "a plain publish of a valid event", m: func() *nats.Msg {
			m := appended(t, opSubject, events.TypeCompleted, completed("demo", opA))
			m.Subject = events.LiveSubject(opSubject)
			return m
		}(), forged: true, errPart: notStored},
		{name: "a single direct get's copy", m: copyOf(nil), forged: true, errPart: notStored},
		{name: "a direct get batch answer", m: copyOf(map[string]string{"Nats-Num-Pending": "0", "Nats-Last-Sequence": "3"}),
			forged: true, errPart: notStored},
		{name: "a direct get's end of batch", m: &nats.Msg{Subject: events.LiveSubject(opSubject), Header: nats.Header{
			"Status": {"204"}, "Description": {"EOB"}, "Nats-Num-Pending": {"0"}, "Nats-Last-Sequence": {"7"},
		}}, forged: true, errPart: notStored},
		// A request an agent stored with forged republish headers, fetched
		// by direct get to a live subject: the server's headers follow
		// the forged ones.
		{name: "forged headers before a direct get's", m: tampered(func(h nats.Header) {
			for k, v := range map[string]string{"Nats-Stream": "AIRLOCK_REQUESTS", "Nats-Subject": "airlock.v1.req.demo.agent", "Nats-Sequence": "3", "Nats-Time-Stamp": storedStamp} {
				h.Add(k, v)
			}
		}), forged: true, errPart: notStored},
		{name: "a second last sequence", m: tampered(func(h nats.Header) { h.Add("Nats-Last-Sequence", "9") }),
			forged: true, errPart: notStored},
		{name: "another stream's name", m: tampered(func(h nats.Header) { h.Set("Nats-Stream", "AIRLOCK_REQUESTS") }),
			forged: true, errPart: notStored},
		{name: "no stream", m: tampered(func(h nats.Header) { h.Del("Nats-Stream") }), forged: true, errPart: notStored},
		{name: "no sequence", m: tampered(func(h nats.Header) { h.Del("Nats-Sequence") }), forged: true, errPart: notStored},
		{name: "sequence 0", m: tampered(func(h nats.Header) { h.Set("Nats-Sequence", "0") }), forged: true, errPart: notStored},
		{name: "a sequence that is not a number", m: tampered(func(h nats.Header) { h.Set("Nats-Sequence", "-7") }), forged: true, errPart: notStored},
		{name: "no time stamp", m: tampered(func(h nats.Header) { h.Del("Nats-Time-Stamp") }), forged: true, errPart: notStored},
		{name: "a time stamp that is not one", m: tampered(func(h nats.Header) { h.Set("Nats-Time-Stamp", "yesterday") }), forged: true, errPart: notStored},
		{name: "no stored subject", m: tampered(func(h nats.Header) { h.Del("Nats-Subject") }), forged: true, errPart: notStored},
		{name: "escapes in a live subject", m: &nats.Msg{Subject: "airlock.v1.live.op.\x1b[2J.op_x.echo.completed", Data: []byte("\x1b[31m")},
			forged: true, errPart: notStored},
		{name: "a live subject that does not match Nats-Subject",
			m:      misrouted(opSubject, events.LiveSubject(events.OpEventSubject("demo", opB, "echo", events.TypeCompleted))),
			forged: true, republished: true,
			errPart: "stored on " + opSubject + " but republished on " + events.LiveSubject(events.OpEventSubject("demo", opB, "echo", events.TypeCompleted))},
		{name: "an op subject itself", m: misrouted(opSubject, opSubject), forged: true, republished: true,
			errPart: "stored on " + opSubject + " but republished on " + opSubject},
		{name: "escapes in a forged stored subject", m: misrouted("airlock.v1.op.\x1b[2J.op_x.echo.completed", events.LiveSubject(opSubject)),
			forged: true, republished: true, errPart: "\x1b[2J"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq, subject, at, ok := watch.Republished(tc.m.Header)
			assert.Equal(t, !tc.forged || tc.republished, ok, "Republished")
			got := watch.Decode(tc.m.Subject, tc.m.Header, tc.m.Data, received)
			assert.Equal(t, watch.Undecodable, got.Kind)
			assert.Empty(t, got.Type)
			if tc.forged {
				// Shown as it arrived: where, when, and nothing its
				// headers claim.
				assert.Equal(t, tc.m.Subject, got.Subject)
				assert.Equal(t, received, got.Time, "arrival time")
				assert.Zero(t, got.Seq)
			} else {
				// Shown as stored: the subject, time and sequence the
				// stream gave it.
				require.True(t, ok)
				assert.Equal(t, tc.m.Header.Get("Nats-Subject"), got.Subject)
				assert.Equal(t, events.LiveSubject(got.Subject), tc.m.Subject)
				assert.Equal(t, subject, got.Subject)
				assert.Equal(t, stored, got.Time, "stored time")
				assert.Equal(t, stored, at)
				assert.Equal(t, tc.m.Header.Get("Nats-Sequence"), strconv.FormatUint(got.Seq, 10))
				assert.Equal(t, seq, got.Seq)
			}
			assert.Equal(t, tc.ws, got.Workspace)
			assert.Equal(t, tc.op, got.OpID)
			assert.Equal(t, tc.tool, got.Tool)
			assert.Contains(t, got.Error, tc.errPart)
			assert.Empty(t, got.State)
			assert.False(t, got.Terminal(), "never among the outcomes: anyone may aim an answer at a live subject")
			line := watch.Line(got)
			assert.Contains(t, line, " undecodable ")
			assert.Contains(t, line, "subject=")
			assertPrintable(t, line)
			body, err := json.Marshal(got)
			require.NoError(t, err)
			assert.Equal(t, !tc.forged, strings.Contains(string(body), `"seq":`), string(body))
		})
	}
}

func assertPrintable(t *testing.T, s string) {
	t.Helper()
	for _, r := range s {
		require.False(t, unicode.IsControl(r), "control character %q in %q", r, s)
	}
}

func TestEventJSON(t *testing.T) {
	n, ms := 17, int64(12)
	e := watch.Event{
		Time: time.Date(2026, 3, 4, 5, 6, 7, 89123000, time.FixedZone("x", 3600)), Seq: 1042,
		Type: events.TypeCompleted, Kind: "completed", Subject: events.OpEventSubject("demo", opA, "echo", events.TypeCompleted),
		Workspace: "demo", OpID: opA, Tool: "echo", State: events.StateCompleted, Attempt: "a1", DurationMS: &ms, ResultBytes: &n,
	}
	body, err := json.Marshal(e)
	require.NoError(t, err)
	assert.Equal(t, `{"time":"2026-03-04T04:06:07.089Z","seq":1042,"type":"dev.airlock.op.completed.v1","event":"completed",`+
		`"subject":"airlock.v1.op.demo.`+opA+`.echo.completed","workspace":"demo","op_id":"`+opA+`","tool":"echo",`+
		`"state":"completed","attempt":"a1","duration_ms":12,"result_bytes":17}`, string(body))

	body, err = json.Marshal(watch.Event{Time: received, Kind: watch.Undecodable, Subject: "airlock.v1.sys.x", Error: "no"})
	require.NoError(t, err)
	assert.Equal(t, `{"time":"2026-03-04T05:06:08.000Z","event":"undecodable","subject":"airlock.v1.sys.x","error":"no"}`, string(body))
}

func TestSubjects(t *testing.T) {
	// What AIRLOCK_OPS republishes once stored, never the subjects it
	// stores on, where anyone's publish or aimed answer would show.
	assert.Equal(t, []string{"airlock.v1.live.>"}, watch.Subjects(""))
	assert.Equal(t, []string{"airlock.v1.live.op.demo.>", "airlock.v1.live.rejected.demo", "airlock.v1.live.sys.mode.demo", "airlock.v1.live.sys.policy"}, watch.Subjects("demo"))
	assert.Equal(t, events.LiveSubjects, watch.Subjects("")[0])
	for _, s := range watch.Subjects("demo") {
		assert.True(t, strings.HasPrefix(s, events.LivePrefix), s)
	}
}

func FuzzDecode(f *testing.F) {
	opSubject := "airlock.v1.op.demo." + opA + ".echo.completed"
	opBody := []byte(`{"op_id":"` + opA + `","workspace":"demo"}`)
	// As republished.
	f.Add(events.LiveSubject(opSubject), "AIRLOCK_OPS", opSubject, "7", storedStamp, "0", "", "1.0", string(events.TypeCompleted), when, opBody)
	f.Add("airlock.v1.live.rejected._", "AIRLOCK_OPS", "airlock.v1.rejected._", "8", storedStamp, "3", "", "1.0", string(events.TypeRejected), "", []byte(`{"code":"INVALID_EVENT","message":"a\u001bb"}`))
	f.Add("airlock.v1.live.sys.policy", "AIRLOCK_OPS", "airlock.v1.sys.policy", "9", "bad time", "0", "", "1.0", string(events.TypePolicyLoaded), "bad time", []byte(`{"hash":"x y"}`))
	f.Add("airlock.v1.live.sys.mode.demo", "AIRLOCK_OPS", "airlock.v1.sys.mode.demo", "10", storedStamp, "0", "", "", "", "", []byte("\x00\xff"))
	// A direct get's copy, single and in a batch; another stream's; on
	// another live subject; a plain publish.
	f.Add(events.LiveSubject(opSubject), "AIRLOCK_OPS", opSubject, "7", storedStamp, "", "", "1.0", string(events.TypeCompleted), when, opBody)
	f.Add(events.LiveSubject(opSubject), "AIRLOCK_OPS", opSubject, "7", storedStamp, "0", "0", "1.0", string(events.TypeCompleted), when, opBody)
	f.Add(events.LiveSubject(opSubject), "AIRLOCK_REQUESTS", opSubject, "7", storedStamp, "0", "", "1.0", string(events.TypeCompleted), when, opBody)
	f.Add("airlock.v1.live.sys.\x1b[2J", "AIRLOCK_OPS", opSubject, "7", storedStamp, "0", "", "1.0", string(events.TypeCompleted), when, opBody)
	f.Add(events.LiveSubject(opSubject), "", "", "", "", "", "", "1.0", string(events.TypeCompleted), when, opBody)
	f.Fuzz(func(t *testing.T, live, stream, subject, seq, stamp, last, pending, spec, typ, ceTime string, body []byte) {
		h := nats.Header{}
		for k, v := range map[string]string{
			"Nats-Stream": stream, "Nats-Subject": subject, "Nats-Sequence": seq, "Nats-Time-Stamp": stamp,
			"Nats-Last-Sequence": last, "Nats-Num-Pending": pending,
		} {
			if v != "" {
				h.Set(k, v)
			}
		}
		if spec != "" {
			h.Set(events.HeaderPrefix+"specversion", spec)
			h.Set(events.HeaderPrefix+"type", typ)
			h.Set(events.HeaderPrefix+"id", "x")
			h.Set(events.HeaderPrefix+"source", "s")
			h.Set(events.HeaderPrefix+"time", ceTime)
		}
		n, storedOn, at, ok := watch.Republished(h)
		if stream != "AIRLOCK_OPS" || subject == "" || seq == "" || stamp == "" || last == "" || pending != "" {
			require.False(t, ok, "not republished by AIRLOCK_OPS")
		}
		e := watch.Decode(live, h, body, received)
		require.NotEmpty(t, e.Kind)
		if ok && events.LiveSubject(storedOn) == live {
			require.NotZero(t, n)
			require.Equal(t, n, e.Seq)
			require.Equal(t, storedOn, e.Subject)
			require.Equal(t, at, e.Time)
		} else {
			require.Equal(t, watch.Undecodable, e.Kind)
			require.Zero(t, e.Seq)
			require.Equal(t, live, e.Subject)
			require.Equal(t, received, e.Time)
			require.Empty(t, e.Workspace+e.OpID+e.Tool)
		}
		if e.Kind == watch.Undecodable {
			require.NotEmpty(t, e.Error)
			require.False(t, e.Terminal())
		}
		line := watch.Line(e)
		require.NotContains(t, line, "\n")
		for _, c := range []string{e.Workspace, e.OpID, e.Tool} {
			require.NotContains(t, c, " ")
		}
		_, err := json.Marshal(e)
		require.NoError(t, err)
		tbl := watch.NewTable("nats://x", "", received)
		tbl.Add(e)
		out := tbl.Render(received, 0, 0)
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			assertPrintable(t, l)
		}
	})
}

func TestEventJSONExpiry(t *testing.T) {
	exp := time.Date(2026, 3, 4, 5, 16, 7, 0, time.FixedZone("x", -3600))
	// As watch prints it: without HTML escapes.
	body, err := events.MarshalJSON(watch.Event{Time: received, Kind: "held", HoldID: "hold_1", ExpiresAt: &exp, Reason: "a<b"})
	require.NoError(t, err)
	assert.Equal(t, `{"time":"2026-03-04T05:06:08.000Z","event":"held","subject":"","hold_id":"hold_1","reason":"a<b","expires_at":"2026-03-04T06:16:07.000Z"}`, string(body))
}
