package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scripted is an executor whose recovery verdict the test sets.
type scripted struct {
	recovery  executor.Recovery
	runs      atomic.Int32
	recovered atomic.Int32
	lost      atomic.Pointer[executor.Lost]
}

func (s *scripted) Tool() string        { return "scripted" }
func (s *scripted) Class() events.Class { return events.ClassWrite }
func (s *scripted) Execute(_ context.Context, c executor.Call) (json.RawMessage, error) {
	s.runs.Add(1)
	return json.RawMessage(`{"ran":true}`), nil
}
func (s *scripted) Recover(_ context.Context, _ executor.Call, l executor.Lost) (executor.Recovery, error) {
	s.recovered.Add(1)
	s.lost.Store(&l)
	return s.recovery, nil
}

// readyOp writes a request for tool and its decided event, as the gate
// would, and returns the op id and the decided event's sequence.
func readyOp(t *testing.T, n *testenv.NATS, tool, args string) (op string, decidedSeq uint64) {
	t.Helper()
	ctx := context.Background()
	req := events.Request{Workspace: "rec", Agent: "a", Tool: tool, Args: json.RawMessage(args)}
	require.NoError(t, req.Validate())
	body, err := json.Marshal(req)
	require.NoError(t, err)
	ack, err := n.JetStream.PublishMsg(ctx, events.NewMessage(events.RequestSubject("rec", "a"), events.TypeRequested, "test", "", req.FingerprintHex(), body))
	require.NoError(t, err)
	op = events.OpID(req.Fingerprint())
	ops, err := n.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	decidedSeq, err = testenv.Writer(t, n.JetStream).Append(ctx, ops, oplog.Op{Workspace: "rec", ID: op, Tool: tool}, 0, events.TypeDecided, "test", &events.Decided{
		OpHeader:   events.OpHeader{OpID: op, Workspace: "rec"},
		Request:    &events.Summary{Fingerprint: req.FingerprintHex(), Agent: "a", Tool: tool, Class: "write", ArgsDigest: events.ArgsDigest(req.Args), RequestSeq: ack.Sequence},
		PolicyHash: "sha256:test", Reason: "test",
	}, oplog.ReplyTo(replySubject(op)))
	require.NoError(t, err)
	return op, decidedSeq
}

// replySubject is where the runner answers the request of op.
func replySubject(op string) string { return events.ReplyPrefix("a") + "test." + op }

// replies subscribes to op's reply subject; the function it returns waits
// for the next reply.
func replies(t *testing.T, n *testenv.NATS, op string) func() events.Reply {
	t.Helper()
	sub, err := n.Conn.SubscribeSync(replySubject(op))
	require.NoError(t, err)
	require.NoError(t, n.Conn.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() events.Reply {
		t.Helper()
		m, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err, "no reply")
		var r events.Reply
		require.NoError(t, json.Unmarshal(m.Data, &r))
		return r
	}
}

// The instances of the recovery tests: the runner under test, and another
// of its deployment.
const (
	thisInstance  = "00000000000000aa"
	otherInstance = "00000000000000bb"
)

// The forms a lost attempt leaves in the op log: a started event that
// claims the op (ADR 0023); a claimed event then a started event, or a
// claimed event alone, as versions before it wrote them.
type lostForm int

const (
	startedClaim lostForm = iota
	claimedThenStarted
	claimedOnly
)

func (f lostForm) String() string {
	return [...]string{"started claims", "claimed then started", "claimed only"}[f]
}

// lostClaim writes what a runner of instance that died mid-call leaves
// behind, in form: the request, the decided event, and the attempt's
// claim, made through the default consumer's first delivery of it. It
// returns the op id and its newest sequence.
func lostClaim(t *testing.T, n *testenv.NATS, instance string, form lostForm) (op string, lastSeq uint64) {
	t.Helper()
	op, decidedSeq := readyOp(t, n, "scripted", `{"x":1}`)
	ops, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	o := oplog.Op{Workspace: "rec", ID: op, Tool: "scripted"}
	claim := events.Claim{
		Executor: "scripted", WorkSeq: decidedSeq, Delivery: 1, Consumer: streams.ExecutorConsumer(streams.DefaultExecutorGroup, "scripted"),
		Runner: "gone-runner", Instance: instance, Host: "host-" + instance,
	}
	hdr := events.OpHeader{OpID: op, Workspace: "rec"}
	w := testenv.Writer(t, n.JetStream)
	lastSeq = decidedSeq
	if form != startedClaim {
		lastSeq, err = w.Append(context.Background(), ops, o, lastSeq, events.TypeClaimed, "test", &events.Claimed{OpHeader: hdr, Attempt: "lost-attempt", Claim: claim})
		require.NoError(t, err)
	}
	if form == claimedOnly {
		return op, lastSeq
	}
	st := &events.Started{OpHeader: hdr, Attempt: "lost-attempt", Evidence: json.RawMessage(`{"files":[]}`)}
	if form == startedClaim {
		st.Claim = &claim
	}
	lastSeq, err = w.Append(context.Background(), ops, o, lastSeq, events.TypeStarted, "test", st)
	require.NoError(t, err)
	return op, lastSeq
}

func runRunner(t *testing.T, n *testenv.NATS, ex executor.Executor) {
	t.Helper()
	reg, err := executor.NewRegistry(ex)
	require.NoError(t, err)
	r, err := executor.NewRunner(executor.Config{JetStream: n.JetStream, Registry: reg, ClaimTimeout: 300 * time.Millisecond,
		Instance: thisInstance, OwnerTries: 3, OwnerRetryDelay: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func lastEvent(t *testing.T, js jetstream.JetStream, op string) *oplog.Event {
	t.Helper()
	ops, err := js.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	var last *oplog.Event
	require.Eventually(t, func() bool {
		last, err = oplog.Last(context.Background(), ops, "rec", op)
		require.NoError(t, err)
		return last.Type == events.TypeCompleted || last.Type == events.TypeAmbiguous || last.Type == events.TypeFailed
	}, 10*time.Second, 10*time.Millisecond)
	return last
}

// A claim of an earlier version lost before its started event was stored
// never reached its effect: it runs again under a new attempt, without
// asking the executor, whichever instance made it. (This version claims
// and starts in one event, and leaves no such claim.)
func TestLostClaimNeverStartedRunsAgain(t *testing.T) {
	for _, instance := range []string{thisInstance, otherInstance} {
		t.Run(instance, func(t *testing.T) {
			n := testenv.StartNATS(t, streams.Config{})
			op, _ := lostClaim(t, n, instance, claimedOnly)
			ex := &scripted{recovery: executor.Recovery{Action: executor.Ambiguous, Known: "not asked"}}
			runRunner(t, n, ex)
			last := lastEvent(t, n.JetStream, op)
			require.Equal(t, events.TypeCompleted, last.Type)
			assert.True(t, last.Data.(*events.Completed).Recovered)
			assert.Equal(t, int32(1), ex.runs.Load())
			assert.Zero(t, ex.recovered.Load(), "an attempt that never started is not the executor's to judge")
			assert.Equal(t, []events.Type{events.TypeDecided, events.TypeClaimed, events.TypeStarted, events.TypeCompleted},
				testenv.OpEvents(t, n.JetStream, "rec", op))
			st := opEvent(t, n, op, 2).(*events.Started)
			require.NotNil(t, st.Claim, "the rerun's started event claims the op")
			assert.Equal(t, "lost-attempt", st.Claim.Recovers)
			assert.Equal(t, thisInstance, st.Claim.Instance)
		})
	}
}

func TestLostClaimRecovery(t *testing.T) {
	cases := []recoveryCase{
		{"ambiguous is terminal and never reruns", thisInstance, executor.Recovery{Action: executor.Ambiguous, Known: "may have run"},
			[]events.Type{events.TypeAmbiguous}, 0},
		{"done records the lost attempt's result", thisInstance, executor.Recovery{Action: executor.Done, Result: json.RawMessage(`{"from":"ledger"}`)},
			[]events.Type{events.TypeCompleted}, 0},
		{"rerun runs once under a new claim", thisInstance, executor.Recovery{Action: executor.Rerun},
			[]events.Type{events.TypeStarted, events.TypeCompleted}, 1},
		{"defer of its own attempt is ambiguous at once", thisInstance, executor.Recovery{Action: executor.Defer, Known: "only the owner knows"},
			[]events.Type{events.TypeAmbiguous}, 0},
		{"defer waits for the owner, then ends ambiguous", otherInstance, executor.Recovery{Action: executor.Defer, Known: "only the owner knows"},
			[]events.Type{events.TypeAmbiguous}, 0},
	}
	for _, form := range []lostForm{startedClaim, claimedThenStarted} {
		for _, tc := range cases {
			t.Run(form.String()+"/"+tc.name, func(t *testing.T) {
				lostAttemptRecovery(t, form, tc)
			})
		}
	}
}

// recoveryCase is a lost attempt's recovery: the instance that made it,
// the executor's verdict, the events it leads to after the lost attempt's
// own, and how often the call runs again.
type recoveryCase struct {
	name     string
	instance string
	recovery executor.Recovery
	want     []events.Type
	runs     int32
}

// lostAttemptRecovery recovers an attempt lost in form, as tc says.
func lostAttemptRecovery(t *testing.T, form lostForm, tc recoveryCase) {
	n := testenv.StartNATS(t, streams.Config{})
	op, _ := lostClaim(t, n, tc.instance, form)
	next := replies(t, n, op)
	ex := &scripted{recovery: tc.recovery}
	runRunner(t, n, ex)
	last := lastEvent(t, n.JetStream, op)
	before := []events.Type{events.TypeDecided, events.TypeStarted}
	if form == claimedThenStarted {
		before = []events.Type{events.TypeDecided, events.TypeClaimed, events.TypeStarted}
	}
	assert.Equal(t, append(before, tc.want...), testenv.OpEvents(t, n.JetStream, "rec", op))
	assert.Equal(t, tc.runs, ex.runs.Load())
	lost := ex.lost.Load()
	require.NotNil(t, lost)
	assert.Equal(t, "lost-attempt", lost.Attempt)
	assert.Equal(t, tc.instance, lost.Instance)
	assert.Equal(t, "host-"+tc.instance, lost.Host)
	assert.Equal(t, "gone-runner", lost.Runner)
	assert.Equal(t, tc.instance == thisInstance, lost.Own)
	assert.JSONEq(t, `{"files":[]}`, string(lost.Evidence), "the started event's evidence reaches Recover")
	assert.False(t, lost.StartedAt.IsZero())
	if tc.recovery.Action == executor.Defer && !lost.Own {
		// The claim names delivery 1, and this consumer's first
		// delivery is 1 too: deferred until delivery 1+1+OwnerTries
		// (3), at which the op ends.
		assert.Equal(t, int32(5), ex.recovered.Load())
	} else {
		assert.Equal(t, int32(1), ex.recovered.Load())
	}
	switch d := last.Data.(type) {
	case *events.Ambiguous:
		assert.Equal(t, "lost-attempt", d.Attempt)
		assert.Equal(t, events.CodeAmbiguous, d.Code)
		assert.Equal(t, tc.instance, d.Instance)
		assert.Equal(t, "host-"+tc.instance, d.Host)
		assert.Contains(t, d.Known, "attempt lost-attempt of instance "+tc.instance+" on host host-"+tc.instance+", started ")
		assert.True(t, strings.HasSuffix(d.Known, ": "+tc.recovery.Known), d.Known)
	case *events.Completed:
		assert.True(t, d.Recovered, "completed through recovery")
		want := `{"ran":true}`
		if tc.recovery.Action == executor.Done {
			want = `{"from":"ledger"}`
			assert.Equal(t, "lost-attempt", d.Attempt, "Done completes the lost attempt itself")
		}
		// The event holds the digest; the result goes to the reply.
		assert.Equal(t, events.Digest([]byte(want)), d.ResultDigest)
		assert.Equal(t, len(want), d.ResultBytes)
		r := next()
		assert.Equal(t, events.StateCompleted, r.State)
		assert.JSONEq(t, want, string(r.Result), "a recovered result reaches the reply")
		assert.Equal(t, d.ResultDigest, r.ResultDigest)
	default:
		t.Fatalf("last event %T", d)
	}
}

// opEvent is the ith event (from 0) of op in workspace rec.
func opEvent(t *testing.T, n *testenv.NATS, op string, i int) any {
	t.Helper()
	ops, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	m, err := ops.GetMsg(context.Background(), 1, jetstream.WithGetMsgSubject(events.OpFilter("rec", op)))
	require.NoError(t, err)
	for seq := m.Sequence; ; seq++ {
		raw, err := ops.GetMsg(context.Background(), seq)
		if err != nil || !strings.HasPrefix(raw.Subject, "airlock.v1.op.rec."+op+".") {
			continue
		}
		if i == 0 {
			ev, err := oplog.Decode(raw)
			require.NoError(t, err)
			return ev.Data
		}
		i--
	}
}

// A decided event whose request a replica behind the leader answers for
// ("not found" by direct get) runs all the same: the runner asks the
// leader before it fails an op REQUEST_UNAVAILABLE.
func TestRequestReadBehindAReplicaRuns(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	testenv.StaleRequestsResponder(t, n)
	var ops []string
	for i := range 40 {
		op, _ := readyOp(t, n, "echo", fmt.Sprintf(`{"i":%d}`, i))
		ops = append(ops, op)
	}
	runRunner(t, n, executor.Echo{})
	for _, op := range ops {
		last := lastEvent(t, n.JetStream, op)
		if !assert.Equal(t, events.TypeCompleted, last.Type, "op %s", op) {
			t.Logf("%+v", last.Data)
		}
	}
}

// A lost claim written by a version without started events names no
// instance: its attempt may have run anywhere, so the executor judges it
// as another instance's started attempt, and a Defer ends ambiguous.
func TestLostClaimOfAnEarlierVersionIsInDoubt(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	op, _ := lostClaim(t, n, "", claimedOnly)
	ex := &scripted{recovery: executor.Recovery{Action: executor.Defer, Known: "no record here"}}
	runRunner(t, n, ex)
	last := lastEvent(t, n.JetStream, op)
	assert.Equal(t, events.TypeAmbiguous, last.Type)
	assert.Zero(t, ex.runs.Load(), "never run again")
	lost := ex.lost.Load()
	require.NotNil(t, lost)
	assert.False(t, lost.Own)
	assert.True(t, lost.StartedAt.IsZero())
}

// A decided event whose request the stream does not hold is read again
// for RequestTries deliveries, a second apart (a leader elected a moment
// ago may store it later), then the op fails REQUEST_UNAVAILABLE.
func TestRequestNotFoundIsReadAgainBeforeTheOpFails(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	op, _ := readyOp(t, n, "echo", `{"gone":true}`)
	requests, err := n.JetStream.Stream(context.Background(), streams.Requests)
	require.NoError(t, err)
	info, err := requests.Info(context.Background())
	require.NoError(t, err)
	require.NoError(t, requests.DeleteMsg(context.Background(), info.State.LastSeq))
	reg, err := executor.NewRegistry(executor.Echo{})
	require.NoError(t, err)
	r, err := executor.NewRunner(executor.Config{JetStream: n.JetStream, Registry: reg, ClaimTimeout: 5 * time.Second, Instance: thisInstance, RequestTries: 3})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	ops, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	var last *oplog.Event
	require.Eventually(t, func() bool {
		last, err = oplog.Last(context.Background(), ops, "rec", op)
		require.NoError(t, err)
		return last.Type == events.TypeFailed
	}, 20*time.Second, 20*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second, "two more reads, a second apart, before it fails")
	f := last.Data.(*events.Failed)
	assert.Equal(t, events.CodeRequestUnavailable, f.Code)
	assert.Contains(t, f.Message, "is gone")
}

// touching is a scripted executor whose call touches a file that its
// lost attempt's effect changed: the operands checked again on the
// redelivery differ from the decision's.
type touching struct{ scripted }

func (*touching) Operands(context.Context, string, json.RawMessage) (map[string]string, error) {
	return map[string]string{"f.txt": "sha256:after-the-lost-attempt"}, nil
}

// A redelivered decided event whose op a lost attempt started, and whose
// operands that attempt's effect changed, goes to recovery: the check the
// runner makes before it takes an op does not end an op that another
// attempt holds.
func TestLostAttemptWhoseEffectChangedTheOperandsIsRecovered(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	op, _ := lostClaim(t, n, thisInstance, startedClaim)
	ex := &touching{scripted{recovery: executor.Recovery{Action: executor.Done, Result: json.RawMessage(`{"from":"ledger"}`)}}}
	runRunner(t, n, ex)
	last := lastEvent(t, n.JetStream, op)
	require.Equal(t, events.TypeCompleted, last.Type, "%+v", last.Data)
	assert.Equal(t, "lost-attempt", last.Data.(*events.Completed).Attempt)
	assert.Equal(t, int32(1), ex.recovered.Load())
	assert.Zero(t, ex.runs.Load())
	assert.Equal(t, []events.Type{events.TypeDecided, events.TypeStarted, events.TypeCompleted}, testenv.OpEvents(t, n.JetStream, "rec", op))
}
