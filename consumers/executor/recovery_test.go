package executor_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/policy"
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
}

func (s *scripted) Tool() string        { return "scripted" }
func (s *scripted) Class() policy.Class { return policy.ClassWrite }
func (s *scripted) Execute(_ context.Context, c executor.Call) (json.RawMessage, error) {
	s.runs.Add(1)
	return json.RawMessage(`{"ran":true}`), nil
}
func (s *scripted) Recover(context.Context, executor.Call, string) (executor.Recovery, error) {
	s.recovered.Add(1)
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
	decidedSeq, err = oplog.Append(ctx, n.JetStream, ops, oplog.Op{Workspace: "rec", ID: op, Tool: tool}, 0, events.TypeDecided, "test", &events.Decided{
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

// lostClaim writes what a runner that died mid-call leaves behind: the
// request, the decided event, and a claim made through the default
// consumer's first delivery of it.
func lostClaim(t *testing.T, n *testenv.NATS) (op string, claimSeq uint64) {
	t.Helper()
	op, decidedSeq := readyOp(t, n, "scripted", `{"x":1}`)
	ops, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	claimSeq, err = oplog.Append(context.Background(), n.JetStream, ops, oplog.Op{Workspace: "rec", ID: op, Tool: "scripted"}, decidedSeq, events.TypeClaimed, "test", &events.Claimed{
		OpHeader: events.OpHeader{OpID: op, Workspace: "rec"}, Attempt: "lost-attempt", Executor: "scripted",
		WorkSeq: decidedSeq, Delivery: 1, Consumer: streams.ExecutorConsumer(streams.DefaultExecutorGroup, "scripted"),
	})
	require.NoError(t, err)
	return op, claimSeq
}

func runRunner(t *testing.T, n *testenv.NATS, ex executor.Executor) {
	t.Helper()
	reg, err := executor.NewRegistry(ex)
	require.NoError(t, err)
	r, err := executor.NewRunner(executor.Config{JetStream: n.JetStream, Registry: reg, ClaimTimeout: 300 * time.Millisecond})
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

func TestLostClaimRecovery(t *testing.T) {
	cases := []struct {
		name     string
		recovery executor.Recovery
		want     events.Type
		runs     int32
	}{
		{"ambiguous is terminal and never reruns", executor.Recovery{Action: executor.Ambiguous, Known: "may have run"}, events.TypeAmbiguous, 0},
		{"done records the executor's own result", executor.Recovery{Action: executor.Done, Result: json.RawMessage(`{"from":"ledger"}`)}, events.TypeCompleted, 0},
		{"rerun runs once under a new claim", executor.Recovery{Action: executor.Rerun}, events.TypeCompleted, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := testenv.StartNATS(t, streams.Config{})
			op, _ := lostClaim(t, n)
			next := replies(t, n, op)
			ex := &scripted{recovery: tc.recovery}
			runRunner(t, n, ex)
			last := lastEvent(t, n.JetStream, op)
			assert.Equal(t, tc.want, last.Type)
			assert.Equal(t, tc.runs, ex.runs.Load())
			assert.Equal(t, int32(1), ex.recovered.Load())
			switch d := last.Data.(type) {
			case *events.Ambiguous:
				assert.Equal(t, "lost-attempt", d.Attempt)
				assert.Equal(t, events.CodeAmbiguous, d.Code)
				assert.Equal(t, "may have run", d.Known)
			case *events.Completed:
				assert.True(t, d.Recovered, "completed through recovery")
				want := `{"ran":true}`
				if tc.recovery.Action == executor.Done {
					want = `{"from":"ledger"}`
				}
				// The event holds the digest; the result goes to the reply.
				assert.Equal(t, events.Digest([]byte(want)), d.ResultDigest)
				assert.Equal(t, len(want), d.ResultBytes)
				r := next()
				assert.Equal(t, events.StateCompleted, r.State)
				assert.JSONEq(t, want, string(r.Result), "a recovered result reaches the reply")
				assert.Equal(t, d.ResultDigest, r.ResultDigest)
			}
		})
	}
}
