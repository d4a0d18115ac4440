package watch_test

import (
	"encoding/json"
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
	opA  = "op_0123456789abcdef0123456789abcdef"
	opB  = "op_fedcba9876543210fedcba9876543210"
	when = "2026-03-04T05:06:07.089123Z"
)

var received = time.Date(2026, 3, 4, 5, 6, 8, 0, time.UTC)

// msg is an event of type t with data, as Airlock appends it on subject,
// with ce-time when.
func msg(t *testing.T, subject string, typ events.Type, data any) *nats.Msg {
	t.Helper()
	ev, err := events.NewEvent(typ, "airlock/test", "", data)
	require.NoError(t, err)
	m := events.Encode(subject, ev)
	m.Header.Set(events.HeaderPrefix+"time", when)
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
			data: &events.Claimed{OpHeader: hdr("demo", opA), Attempt: "att2", Recovers: "att1", Executor: "echo", Runner: "r1"},
			want: watch.Event{Kind: "claimed", State: events.StateExecuting, Attempt: "att2", Recovers: "att1"}},
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
			m := msg(t, tc.subject, tc.typ, tc.data)
			got := watch.Decode(m.Subject, m.Header, m.Data, received)
			want := tc.want
			want.Time = time.Date(2026, 3, 4, 5, 6, 7, 89123000, time.UTC)
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
	stored := msg(t, opSubject, events.TypeCompleted, completed("demo", opA))
	stored.Header.Set("Nats-Stream", "AIRLOCK_OPS")
	stored.Header.Set("Nats-Sequence", "7")
	for _, tc := range []struct {
		name    string
		m       *nats.Msg
		ws, op  string // the columns the subject fills
		tool    string
		errPart string
	}{
		{name: "no headers", m: &nats.Msg{Subject: opSubject, Data: []byte("not an event")},
			ws: "demo", op: opA, tool: "echo", errPart: "not a CloudEvent"},
		{name: "a query answer", m: &nats.Msg{Subject: events.RejectedSubject("demo"), Data: []byte(`{"ops":[]}`)},
			ws: "demo", errPart: "not a CloudEvent"},
		{name: "data that does not decode", m: func() *nats.Msg {
			m := msg(t, opSubject, events.TypeCompleted, completed("demo", opA))
			m.Data = []byte(`{"result_bytes":"many"}`)
			return m
		}(), ws: "demo", op: opA, tool: "echo", errPart: "completed data"},
		{name: "an unknown type", m: func() *nats.Msg {
			m := msg(t, opSubject, events.TypeCompleted, completed("demo", opA))
			m.Header.Set(events.HeaderPrefix+"type", "dev.airlock.op.teleported.v1")
			return m
		}(), ws: "demo", op: opA, tool: "echo", errPart: "UNKNOWN_EVENT_TYPE"},
		{name: "a stored copy", m: stored, ws: "demo", op: opA, tool: "echo", errPart: "a copy of a message stored in AIRLOCK_OPS"},
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
		{name: "escapes in the subject", m: &nats.Msg{Subject: "airlock.v1.op.\x1b[2J.op_x.echo.completed", Data: []byte("\x1b[31m")},
			errPart: "not a CloudEvent"},
		{name: "a bad op id", m: msg(t, "airlock.v1.op.demo.op_x.echo.completed", events.TypeCompleted, completed("demo", "op_x")),
			ws: "", errPart: "on another subject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := watch.Decode(tc.m.Subject, tc.m.Header, tc.m.Data, received)
			assert.Equal(t, watch.Undecodable, got.Kind)
			assert.Equal(t, tc.m.Subject, got.Subject)
			assert.Equal(t, tc.ws, got.Workspace)
			assert.Equal(t, tc.op, got.OpID)
			assert.Equal(t, tc.tool, got.Tool)
			assert.Contains(t, got.Error, tc.errPart)
			assert.Empty(t, got.State)
			assert.True(t, got.Terminal(), "shown among the outcomes")
			line := watch.Line(got)
			assert.Contains(t, line, " undecodable ")
			assert.Contains(t, line, "subject=")
			assertPrintable(t, line)
			if tc.m.Header.Get(events.HeaderPrefix+"time") == "" {
				assert.Equal(t, received, got.Time, "arrival time when it has none")
			}
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
		Time: time.Date(2026, 3, 4, 5, 6, 7, 89123000, time.FixedZone("x", 3600)),
		Type: events.TypeCompleted, Kind: "completed", Subject: events.OpEventSubject("demo", opA, "echo", events.TypeCompleted),
		Workspace: "demo", OpID: opA, Tool: "echo", State: events.StateCompleted, Attempt: "a1", DurationMS: &ms, ResultBytes: &n,
	}
	body, err := json.Marshal(e)
	require.NoError(t, err)
	assert.Equal(t, `{"time":"2026-03-04T04:06:07.089Z","type":"dev.airlock.op.completed.v1","event":"completed",`+
		`"subject":"airlock.v1.op.demo.`+opA+`.echo.completed","workspace":"demo","op_id":"`+opA+`","tool":"echo",`+
		`"state":"completed","attempt":"a1","duration_ms":12,"result_bytes":17}`, string(body))

	body, err = json.Marshal(watch.Event{Time: received, Kind: watch.Undecodable, Subject: "airlock.v1.sys.x", Error: "no"})
	require.NoError(t, err)
	assert.Equal(t, `{"time":"2026-03-04T05:06:08.000Z","event":"undecodable","subject":"airlock.v1.sys.x","error":"no"}`, string(body))
}

func TestSubjects(t *testing.T) {
	assert.Equal(t, []string{"airlock.v1.op.>", "airlock.v1.rejected.>", "airlock.v1.sys.>"}, watch.Subjects(""))
	assert.Equal(t, []string{"airlock.v1.op.demo.>", "airlock.v1.rejected.demo", "airlock.v1.sys.mode.demo", "airlock.v1.sys.policy"}, watch.Subjects("demo"))
}

func FuzzDecode(f *testing.F) {
	f.Add("airlock.v1.op.demo."+opA+".echo.completed", "1.0", string(events.TypeCompleted), when, []byte(`{"op_id":"`+opA+`","workspace":"demo"}`))
	f.Add("airlock.v1.rejected._", "1.0", string(events.TypeRejected), "", []byte(`{"code":"INVALID_EVENT","message":"a\u001bb"}`))
	f.Add("airlock.v1.sys.policy", "1.0", string(events.TypePolicyLoaded), "bad time", []byte(`{"hash":"x y"}`))
	f.Add("airlock.v1.sys.mode.demo", "", "", "", []byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, subject, spec, typ, ceTime string, body []byte) {
		h := nats.Header{}
		if spec != "" {
			h.Set(events.HeaderPrefix+"specversion", spec)
			h.Set(events.HeaderPrefix+"type", typ)
			h.Set(events.HeaderPrefix+"id", "x")
			h.Set(events.HeaderPrefix+"source", "s")
			h.Set(events.HeaderPrefix+"time", ceTime)
		}
		e := watch.Decode(subject, h, body, received)
		require.NotEmpty(t, e.Kind)
		if e.Kind == watch.Undecodable {
			require.NotEmpty(t, e.Error)
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
