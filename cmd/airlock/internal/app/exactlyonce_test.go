package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/testexec"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingApp starts Airlock with the durable counting executor.
func countingApp(t *testing.T, cfg app.Config) (*app.App, *testexec.Counter) {
	t.Helper()
	c := &testexec.Counter{Dir: t.TempDir()}
	cfg.Executors = append(cfg.Executors, c)
	return apptest.StartApp(t, cfg), c
}

// waitSettled waits until the durable consumer of stream has nothing
// pending and nothing delivered that is not acknowledged.
func waitSettled(t *testing.T, js jetstream.JetStream, stream, consumer string, msgAndArgs ...any) {
	t.Helper()
	ctx := ctxT(t)
	cons, err := js.Consumer(ctx, stream, consumer)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, 10*time.Second, 10*time.Millisecond, msgAndArgs...)
}

// waitRunning waits until the counter has recorded op's execution: its
// call has begun.
func waitRunning(t *testing.T, c *testexec.Counter, op string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(c.Dir, op))
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the call is running")
}

// executions counts the records the counter left for op; a DOUBLE file
// means some op ran twice.
func executions(t *testing.T, c *testexec.Counter, op string) int {
	t.Helper()
	_, err := os.Stat(filepath.Join(c.Dir, "DOUBLE"))
	require.True(t, os.IsNotExist(err), "an op executed twice")
	if _, err := os.Stat(filepath.Join(c.Dir, op)); err == nil {
		return 1
	}
	return 0
}

func requestMsg(t *testing.T, req events.Request) *nats.Msg {
	t.Helper()
	require.NoError(t, req.Validate())
	body, err := json.Marshal(req)
	require.NoError(t, err)
	ev, err := events.NewEventRaw(events.TypeRequested, "test", "", req.FingerprintHex(), body)
	require.NoError(t, err)
	return events.Encode(events.RequestSubject(req.Workspace, req.Agent), ev)
}

func waitTerminal(t *testing.T, a *app.App, op string) *events.Op {
	t.Helper()
	var got *events.Op
	require.Eventually(t, func() bool {
		o, err := a.Store.Op(op)
		if err != nil {
			return false
		}
		got = o
		return o.State.Terminal()
	}, 20*time.Second, 10*time.Millisecond)
	return got
}

func TestDuplicatePublishRunsOnce(t *testing.T) {
	a, counter := countingApp(t, app.Config{})
	req := events.Request{Workspace: "ws", Agent: "ag", Tool: "count", Args: json.RawMessage(`{"x":1}`)}
	msg := requestMsg(t, req)
	fp := req.FingerprintHex()
	op := events.OpID(req.Fingerprint())
	ctx := context.Background()
	acks := make([]*jetstream.PubAck, 5)
	for i := range acks {
		ack, err := a.JetStream.PublishMsg(ctx, msg, jetstream.WithMsgID(fp))
		require.NoError(t, err)
		acks[i] = ack
	}
	for _, ack := range acks[1:] {
		assert.True(t, ack.Duplicate)
		assert.Equal(t, acks[0].Sequence, ack.Sequence)
	}
	got := waitTerminal(t, a, op)
	assert.Equal(t, events.StateCompleted, got.State)
	assert.Equal(t, 1, executions(t, counter, op))
	// One attempt: the gate's process started it (the first copy's
	// started event came first), or a copy's decided event came first
	// (the gate holds the op for the first copy, so the others are
	// decided) and the runner took it.
	evs := testenv.OpEvents(t, a.JetStream, "ws", op)
	if len(evs) == 3 {
		assert.Equal(t, events.TypeDecided, evs[0])
		evs = evs[1:]
	}
	assert.Equal(t, []events.Type{events.TypeStarted, events.TypeCompleted}, evs)
}

func TestRetryAfterDedupeWindowResolvesToSameOp(t *testing.T) {
	a, counter := countingApp(t, app.Config{Streams: streams.Config{Duplicates: 200 * time.Millisecond}})
	c, _ := apptest.Client(t, a.ClientURL())
	req := events.Request{Workspace: "ws", Agent: "ag", Tool: "count", Args: json.RawMessage(`{"x":2}`)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := c.Submit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, first.State)

	time.Sleep(400 * time.Millisecond) // let the dedupe window pass: this is the point of the test
	before, err := a.JetStream.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	reqsBefore := before.CachedInfo().State.LastSeq

	second, err := c.Submit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first.OpID, second.OpID)
	assert.Equal(t, events.StateCompleted, second.State)
	// The result is kept for the agent: the retry gets it again, the
	// same bytes the first request's reply had.
	assert.NotEmpty(t, first.Result)
	assert.Equal(t, string(first.Result), string(second.Result))
	assert.Equal(t, first.ResultDigest, second.ResultDigest)
	assert.Equal(t, first.ResultBytes, second.ResultBytes)

	after, err := a.JetStream.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	assert.Equal(t, reqsBefore+1, after.CachedInfo().State.LastSeq, "the retry is stored (the window passed) but adds no op event")
	// Both copies of the args go: the op's request once it ended, the
	// retry's as soon as the gate answered it.
	require.Eventually(t, func() bool {
		info, err := after.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, executions(t, counter, first.OpID))
	assert.Equal(t, []events.Type{events.TypeStarted, events.TypeCompleted}, testenv.OpEvents(t, a.JetStream, "ws", first.OpID))
}

func TestRacingExecutorsRunOnce(t *testing.T) {
	// Two Airlocks share one NATS, with executor groups of their own, so
	// every decided event reaches both and both race to claim every op.
	// Their gates decide every op (GateDecidesAll), starting none.
	n := testenv.StartNATS(t, streams.Config{})
	counter := &testexec.Counter{Dir: t.TempDir()}
	var apps []*app.App
	dirs := testenv.DeploymentDirs(t)
	for _, group := range []string{"left", "right"} {
		apps = append(apps, apptest.StartApp(t, app.Config{DataDir: dirs(), NATSURL: n.Server.ClientURL(), ExecutorGroup: group, Executors: []executor.Executor{counter}, GateDecidesAll: true}))
	}
	ctx := context.Background()
	const ops = 60
	var ids []string
	for i := range ops {
		req := events.Request{Workspace: "race", Agent: "ag", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		_, err := n.JetStream.PublishMsg(ctx, requestMsg(t, req), jetstream.WithMsgID(req.FingerprintHex()))
		require.NoError(t, err)
		ids = append(ids, events.OpID(req.Fingerprint()))
	}
	for _, id := range ids {
		got := waitTerminal(t, apps[0], id)
		assert.Equal(t, events.StateCompleted, got.State, id)
		assert.Equal(t, 1, got.Attempts, id)
		assert.Equal(t, 1, executions(t, counter, id), id)
		assert.Equal(t, []events.Type{events.TypeDecided, events.TypeStarted, events.TypeCompleted}, testenv.OpEvents(t, n.JetStream, "race", id))
	}
	// Both groups took every decided event and settled it: the winner by
	// running it, the loser by reading the winner's claim.
	for _, group := range []string{"left", "right"} {
		cons, err := n.JetStream.Consumer(ctx, streams.Ops, streams.ExecutorConsumer(group, "count"))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			info, err := cons.Info(ctx)
			return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Consumer >= ops
		}, 10*time.Second, 20*time.Millisecond, group)
	}
}

// Two processes of one executor group share the work. Calls outlast the
// claim timeout while others wait in each process's buffer: heartbeats
// from receipt keep every held delivery from being redelivered, so no op
// is recovered, let alone run twice.
func TestOneGroupManyProcessesNoRedelivery(t *testing.T) {
	if testing.Short() {
		t.Skip("slow calls")
	}
	n := testenv.StartNATS(t, streams.Config{})
	counter := &testexec.Counter{Dir: t.TempDir(), Name: "slow", Delay: 700 * time.Millisecond}
	var apps []*app.App
	dirs := testenv.DeploymentDirs(t)
	for range 2 {
		apps = append(apps, apptest.StartApp(t, app.Config{
			DataDir: dirs(), NATSURL: n.Server.ClientURL(), Executors: []executor.Executor{counter},
			ExecWorkers: 1, ClaimTimeout: 500 * time.Millisecond,
		}))
	}
	ids := publishSlow(t, n.JetStream, "group", 24)
	ranOnceUnrecovered(t, apps[0], counter, ids, "a live claim was taken for a lost one")
}

// publishSlow publishes n requests of the tool "slow" in workspace ws
// and returns their ops.
func publishSlow(t *testing.T, js jetstream.JetStream, ws string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		req := events.Request{Workspace: ws, Agent: "ag", Tool: "slow", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		_, err := js.PublishMsg(context.Background(), requestMsg(t, req), jetstream.WithMsgID(req.FingerprintHex()))
		require.NoError(t, err)
		ids = append(ids, events.OpID(req.Fingerprint()))
	}
	return ids
}

// ranOnceUnrecovered checks that every op completed in one attempt and
// ran once, and that nothing was recovered (a live op taken for lost).
func ranOnceUnrecovered(t *testing.T, a *app.App, counter *testexec.Counter, ids []string, msg string) {
	t.Helper()
	for _, id := range ids {
		got := waitTerminal(t, a, id)
		assert.Equal(t, events.StateCompleted, got.State, id)
		assert.Equal(t, 1, got.Attempts, id)
		assert.Equal(t, 1, executions(t, counter, id), id)
	}
	_, err := os.Stat(filepath.Join(counter.Dir, "RECOVERED"))
	assert.True(t, os.IsNotExist(err), msg)
}

// Copies of one request stored twice (published without Nats-Msg-Id, so
// JetStream keeps both) still make one op that runs once: the second copy
// finds the op taken.
func TestStoredCopiesOfOneRequestRunOnce(t *testing.T) {
	a, counter := countingApp(t, app.Config{})
	req := events.Request{Workspace: "ws", Agent: "ag", Tool: "count", Args: json.RawMessage(`{"copies":3}`)}
	ctx := context.Background()
	for range 3 {
		ack, err := a.JetStream.PublishMsg(ctx, requestMsg(t, req))
		require.NoError(t, err)
		require.False(t, ack.Duplicate)
	}
	op := events.OpID(req.Fingerprint())
	got := waitTerminal(t, a, op)
	assert.Equal(t, events.StateCompleted, got.State)
	assert.Equal(t, 1, executions(t, counter, op))
	cons, err := a.JetStream.Consumer(ctx, streams.Requests, streams.GateConsumer)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Stream == 3
	}, 10*time.Second, 10*time.Millisecond)
	// One attempt: the gate's process started it (the first copy's
	// started event came first), or a copy's decided event came first
	// (the gate holds the op for the first copy, so the others are
	// decided) and the runner took it.
	evs := testenv.OpEvents(t, a.JetStream, "ws", op)
	if len(evs) == 3 {
		assert.Equal(t, events.TypeDecided, evs[0])
		evs = evs[1:]
	}
	assert.Equal(t, []events.Type{events.TypeStarted, events.TypeCompleted}, evs)
}

// The runner takes the args of ops this process's gate decided from the
// handoff, each op its own, and reads none back from the stream.
func TestHandoffCarriesEachOpsArgs(t *testing.T) {
	a := apptest.StartApp(t, app.Config{GateDecidesAll: true})
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ops = 40
	results := make(chan error, ops)
	for i := range ops {
		go func() {
			args := fmt.Sprintf(`{"i":%d,"text":"op %d"}`, i, i)
			out, err := c.Submit(ctx, events.Request{Workspace: "ws", Agent: "ag", Tool: "echo", Args: json.RawMessage(args)})
			switch {
			case err != nil:
				results <- err
			case out.State != events.StateCompleted:
				results <- fmt.Errorf("op %d: %s %s", i, out.State, out.Code)
			case string(out.Result) != args:
				results <- fmt.Errorf("op %d ran with %s", i, out.Result)
			default:
				results <- nil
			}
		}()
	}
	for range ops {
		require.NoError(t, <-results)
	}
	hits, misses := a.Handoff.Stats()
	assert.Equal(t, uint64(ops), hits)
	assert.Zero(t, misses)
	n, _ := a.Handoff.Len()
	assert.Zero(t, n, "every entry was taken")
}

// An op the gate's own process starts (ADR 0025) holds its request until
// it has ended: the request's delivery is the op's work item, kept in
// progress past the claim timeout by heartbeats, acked once the outcome is
// stored and not before, and never delivered again meanwhile.
func TestStartedOpHoldsItsRequestUntilItEnds(t *testing.T) {
	counter := &testexec.Counter{Dir: t.TempDir(), Name: "slow", Delay: 1500 * time.Millisecond}
	a := apptest.StartApp(t, app.Config{Executors: []executor.Executor{counter}, ClaimTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	req := events.Request{Workspace: "ws", Agent: "ag", Tool: "slow", Args: json.RawMessage(`{"held":true}`)}
	_, err := a.JetStream.PublishMsg(ctx, requestMsg(t, req), jetstream.WithMsgID(req.FingerprintHex()))
	require.NoError(t, err)
	op := events.OpID(req.Fingerprint())
	require.Eventually(t, func() bool {
		o, err := a.Store.Op(op)
		return err == nil && o.State == events.StateExecuting
	}, 10*time.Second, 5*time.Millisecond)

	cons, err := a.JetStream.Consumer(ctx, streams.Requests, streams.GateConsumer)
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, info.NumAckPending, "the request is in hand while its op runs")
	time.Sleep(900 * time.Millisecond) // past the claim timeout: the point of the test
	info, err = cons.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, info.NumAckPending, "still in hand")
	assert.Zero(t, info.NumRedelivered, "kept in progress, not delivered again")

	got := waitTerminal(t, a, op)
	assert.Equal(t, events.StateCompleted, got.State)
	assert.Equal(t, 1, got.Attempts)
	assert.Equal(t, 1, executions(t, counter, op))
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumRedelivered == 0
	}, 5*time.Second, 10*time.Millisecond, "acked once the op ended")
	assert.Equal(t, []events.Type{events.TypeStarted, events.TypeCompleted}, testenv.OpEvents(t, a.JetStream, "ws", op))
}

// Two processes share the gate's consumer and an executor group's, with
// different claim timeouts; the one with the shorter starts last. Its
// timeout must not become the shared consumers' ack wait: the other
// process beats what it holds only every third of its own, and its live
// ops would come back, to be taken for lost.
func TestDifferentClaimTimeoutsTakeNoLiveOpForLost(t *testing.T) {
	if testing.Short() {
		t.Skip("slow calls")
	}
	for _, decidesAll := range []bool{false, true} {
		t.Run(fmt.Sprintf("gate_decides_all=%v", decidesAll), func(t *testing.T) {
			n := testenv.StartNATS(t, streams.Config{})
			counter := &testexec.Counter{Dir: t.TempDir(), Name: "slow", Delay: 1500 * time.Millisecond}
			dirs := testenv.DeploymentDirs(t)
			var apps []*app.App
			for _, timeout := range []time.Duration{3 * time.Second, 300 * time.Millisecond} {
				apps = append(apps, apptest.StartApp(t, app.Config{
					DataDir: dirs(), NATSURL: n.Server.ClientURL(), Executors: []executor.Executor{counter},
					ClaimTimeout: timeout, GateDecidesAll: decidesAll,
				}))
			}
			ctx := context.Background()
			shared := []struct{ stream, name string }{{streams.Ops, streams.ExecutorConsumer(streams.DefaultExecutorGroup, "slow")}}
			if !decidesAll {
				// The gate's requests are work items of the ops it starts.
				shared = append(shared, struct{ stream, name string }{streams.Requests, streams.GateConsumer})
			}
			for _, c := range shared {
				cons, err := n.JetStream.Consumer(ctx, c.stream, c.name)
				require.NoError(t, err)
				assert.Equal(t, 3*time.Second, cons.CachedInfo().Config.AckWait, "%s keeps the longer claim timeout", c.name)
			}
			ids := publishSlow(t, n.JetStream, "mixed", 16)
			ranOnceUnrecovered(t, apps[0], counter, ids, "a live op was taken for a lost one")
		})
	}
}

// A process shut down while an op its gate started is running lets the
// call finish and stores its outcome before it stops: the op does not go
// to recovery.
func TestShutdownLetsStartedOpEnd(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	counter := &testexec.Counter{Dir: t.TempDir(), Name: "slow", Delay: time.Second}
	a, err := app.Start(context.Background(), app.Config{DataDir: t.TempDir(), NATSURL: n.Server.ClientURL(), Executors: []executor.Executor{counter}})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped { // a require failed before the shutdown under test
			_ = a.Shutdown(context.Background())
		}
	})
	ctx := context.Background()
	req := events.Request{Workspace: "ws", Agent: "ag", Tool: "slow", Args: json.RawMessage(`{"stop":true}`)}
	_, err = n.JetStream.PublishMsg(ctx, requestMsg(t, req), jetstream.WithMsgID(req.FingerprintHex()))
	require.NoError(t, err)
	op := events.OpID(req.Fingerprint())
	waitRunning(t, counter, op)

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stopped = true
	require.NoError(t, a.Shutdown(sctx))
	assert.Equal(t, []events.Type{events.TypeStarted, events.TypeCompleted}, testenv.OpEvents(t, n.JetStream, "ws", op),
		"the outcome is stored before the process stops")
	waitSettled(t, n.JetStream, streams.Requests, streams.GateConsumer, "and the request is acked")
	assert.Equal(t, 1, executions(t, counter, op))
}
