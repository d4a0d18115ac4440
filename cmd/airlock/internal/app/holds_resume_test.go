package app_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/testexec"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/gate"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The resume of a granted hold: after a restart, without the resume
// consumer, from the request the gate kept, under a policy or controls
// that changed since the hold, and the answers to the submitter.

func TestLockdownBetweenHoldAndGrantDeniesOnResume(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"lock":1}`)})
	waitHeldInProjection(t, a, held.OpID)

	opr, err := producers.NewOperator(connectAs(t, a, "operator"), "operator")
	require.NoError(t, err)
	ms, err := opr.SetMode(ctxT(t), "review", "locked", "incident 7", nil)
	require.NoError(t, err)
	assert.Equal(t, "operator", ms.Actor)
	assert.Equal(t, a.Authority.Principals()[indexOf(t, a, "operator")].PublicKey, ms.ActorKey)

	_, err = approverAs(t, a, "approver").Grant(ctxT(t), held.HoldID, held.ArgsDigest, "fine by me")
	require.NoError(t, err, "the grant itself is recorded")
	got := waitTerminal(t, a, held.OpID)
	assert.Equal(t, events.StateDenied, got.State)
	assert.Equal(t, events.CodeResumeDenied, got.ErrorCode)
	assert.Contains(t, got.Error, string(events.CodeWorkspaceLocked))
	assert.Equal(t, 0, executions(t, counter, held.OpID))

	// The lockdown holds for new requests too, and lifting it restores
	// the policy's mode.
	out, err := c.Submit(ctxT(t), events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"lock":2}`)})
	require.NoError(t, err)
	assert.Equal(t, events.CodeWorkspaceLocked, out.Code)
	_, err = opr.SetMode(ctxT(t), "review", "", "incident over", nil)
	require.NoError(t, err)
	submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"lock":3}`)})

	// Bad controls change nothing.
	_, err = opr.SetMode(ctxT(t), "review", "paranoid", "typo", nil)
	assert.Equal(t, events.CodeInvalidControl, codeOf(err))
	_, err = opr.SetMode(ctxT(t), "review", "locked", "", nil)
	assert.Equal(t, events.CodeInvalidControl, codeOf(err))
}

// A gate that stops after the grant is appended and before it resumed the
// op loses nothing: the granted event is the resume's work item, delivered
// again to the next gate, and the op runs once.
func TestGrantedOpResumesAfterRestart(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	counter := &testexec.Counter{Dir: t.TempDir()}
	dirs := testenv.DeploymentDirs(t)
	cfg := app.Config{DataDir: dirs(), NATSURL: n.Server.ClientURL(), Policy: confirmSpec(), Executors: []executor.Executor{counter}}
	a := apptest.StartApp(t, cfg)
	c, _ := apptest.Client(t, a.ClientURL(), producers.WithWait(10*time.Second))
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"crash":"after grant"}`)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Shutdown(ctx))

	// The grant as the gate appends it, with no gate running to resume.
	st, err := n.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	last, err := oplog.Last(ctx, st, "review", held.OpID)
	require.NoError(t, err)
	_, err = testenv.Writer(t, n.JetStream).Append(ctx, st, oplog.Op{Workspace: "review", ID: held.OpID, Tool: "count"}, last.Seq, events.TypeGranted, "airlock/gate",
		&events.Granted{OpHeader: events.OpHeader{OpID: held.OpID, Workspace: "review"}, HoldID: held.HoldID, ArgsDigest: held.ArgsDigest, Approver: "approver", Reason: "ok"})
	require.NoError(t, err)

	cfg.DataDir = dirs() // another instance of the deployment
	b := apptest.StartApp(t, cfg)
	got := waitTerminal(t, b, held.OpID)
	assert.Equal(t, events.StateCompleted, got.State)
	ranOnceAfterGrant(t, counter, n.JetStream, held.OpID)
}

// The gate that appends a grant of an op that its process does not start
// itself resumes the op at once, by push: with the resume consumer
// paused, the op is still decided and runs, once; the consumer's delivery
// afterwards finds it resumed.
func TestGrantResumesWithoutTheResumeConsumer(t *testing.T) {
	a, counter := holdsApp(t, app.Config{GateDecidesAll: true})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"pushed":1}`)})
	waitHeldInProjection(t, a, held.OpID)
	ctx := ctxT(t)
	_, err := a.JetStream.PauseConsumer(ctx, streams.Ops, streams.ResumeConsumer, time.Now().Add(time.Hour))
	require.NoError(t, err)

	_, err = approverAs(t, a, "approver").Grant(ctx, held.HoldID, held.ArgsDigest, "go")
	require.NoError(t, err)
	got := waitTerminal(t, a, held.OpID)
	require.Equal(t, events.StateCompleted, got.State, got.Error)

	_, err = a.JetStream.ResumeConsumer(ctx, streams.Ops, streams.ResumeConsumer)
	require.NoError(t, err)
	waitSettled(t, a.JetStream, streams.Ops, streams.ResumeConsumer, "the delivery is acknowledged")
	ranOnceAs(t, counter, a.JetStream, held.OpID, grantedDecidedRun)
}

// A granted op that the gate's process starts itself (ADR 0029) has the
// grant's delivery as its work item: it is kept while the op runs, and
// acknowledged only once the op has ended.
func TestResumedOpKeepsItsGrantUntilItEnds(t *testing.T) {
	counter := &testexec.Counter{Dir: t.TempDir(), Delay: 2 * time.Second}
	a := apptest.StartApp(t, app.Config{Auth: true, Policy: confirmSpec(), Executors: []executor.Executor{counter}})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"slow":1}`)})
	waitHeldInProjection(t, a, held.OpID)
	ctx := ctxT(t)
	_, err := approverAs(t, a, "approver").Grant(ctx, held.HoldID, held.ArgsDigest, "go")
	require.NoError(t, err)
	cons, err := a.JetStream.Consumer(ctx, streams.Ops, streams.ResumeConsumer)
	require.NoError(t, err)
	waitRunning(t, counter, held.OpID)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, info.NumAckPending, "the grant's delivery is kept while its op runs")
	op, err := a.Store.Op(held.OpID)
	require.NoError(t, err)
	assert.False(t, op.State.Terminal(), "the op has not ended")

	assert.Equal(t, events.StateCompleted, waitTerminal(t, a, held.OpID).State)
	waitSettled(t, a.JetStream, streams.Ops, streams.ResumeConsumer, "the delivery is acknowledged once the op has ended")
	ranOnceAfterGrant(t, counter, a.JetStream, held.OpID)
}

// The gate that held an op keeps its request, and the grant it resolves
// resumes from it, reading nothing back from AIRLOCK_HELD (where a secure
// delete of an ended op's copy holds the stream's lock while it rewrites
// the block). With the copy gone from the stream, the grant still runs the
// op, once, with its args; a gate that did not hold the op (another
// process, a restart: TestGrantedOpResumesAfterRestart) reads the copy.
func TestGrantResumesFromTheRequestTheGateHeld(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
	c := agentClient(t, a)
	req := events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"kept":"in the gate"}`)}
	held := submitHeld(t, c, counter, req)
	waitHeldInProjection(t, a, held.OpID)
	ctx := ctxT(t)
	hs, err := a.JetStream.Stream(ctx, streams.Held)
	require.NoError(t, err)
	// The gate answers, and the projection folds the hold, before the
	// request has moved.
	var raw *jetstream.RawStreamMsg
	require.Eventually(t, func() bool {
		raw, err = hs.GetLastMsgForSubject(ctx, events.HeldSubject(held.OpID))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the copy in %s", streams.Held)
	require.NoError(t, hs.DeleteMsg(ctx, raw.Sequence))

	_, err = approverAs(t, a, "approver").Grant(ctx, held.HoldID, held.ArgsDigest, "go")
	require.NoError(t, err)
	got := waitTerminal(t, a, held.OpID)
	require.Equal(t, events.StateCompleted, got.State, "%s %s", got.ErrorCode, got.Error)
	assert.Equal(t, 1, executions(t, counter, held.OpID))
	done, err := c.Submit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, done.State)
	assert.JSONEq(t, `{"kept":"in the gate"}`, string(done.Result), "the count executor answers with the args it ran")
}

// A rule added by a reload between the hold and the grant denies the
// resume: the grant does not outrank the policy in force.
func TestReloadedRuleDeniesOnResume(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	const base = "tools: {count: write, echo: read}\nworkspaces: {review: {mode: confirm}}\n"
	require.NoError(t, os.WriteFile(file, []byte(base), 0o600))
	a, counter := holdsApp(t, app.Config{PolicyFile: file})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"target":"prod"}`)})
	waitHeldInProjection(t, a, held.OpID)
	before := a.PolicyHash()

	require.NoError(t, os.WriteFile(file, []byte(base+"rules:\n  - {name: no-prod, when: 'has(args.target) && args.target == \"prod\"', action: deny, reason: frozen}\n"), 0o600))
	require.NoError(t, a.ReloadPolicy(ctxT(t)))
	assert.NotEqual(t, before, a.PolicyHash())
	// A broken file changes nothing.
	require.NoError(t, os.WriteFile(file, []byte("rules: [{name: x, when: 'tool ==', action: deny}]\n"), 0o600))
	require.Error(t, a.ReloadPolicy(ctxT(t)))
	after := a.PolicyHash()

	_, err := approverAs(t, a, "approver").Grant(ctxT(t), held.HoldID, held.ArgsDigest, "fine")
	require.NoError(t, err)
	got := waitTerminal(t, a, held.OpID)
	assert.Equal(t, events.StateDenied, got.State)
	assert.Equal(t, events.CodeResumeDenied, got.ErrorCode)
	assert.Contains(t, got.Error, string(events.CodePolicyDenied))
	assert.Equal(t, "no-prod", got.Rule)
	assert.Equal(t, after, got.PolicyHash)
	assert.Equal(t, 0, executions(t, counter, held.OpID))
}

// The decided event a resume appends carries the request's reply subject,
// so a submitter waiting on the same op hears the outcome at once rather
// than at its next poll.
func TestResumedOpAnswersTheSubmitter(t *testing.T) {
	// The call takes a while, so the retry below finds the op still
	// running and only an answer (or a poll a minute later) ends its wait.
	counter := &testexec.Counter{Dir: t.TempDir(), Delay: 500 * time.Millisecond}
	a := apptest.StartApp(t, app.Config{Auth: true, Policy: confirmSpec(), Executors: []executor.Executor{counter}})
	c, err := producers.New(connectAs(t, a, "agent"), producers.WithWait(20*time.Second), producers.WithPollInterval(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	req := events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"answer":"me"}`)}
	held := submitHeld(t, c, counter, req)
	waitHeldInProjection(t, a, held.OpID)
	_, err = approverAs(t, a, "approver").Grant(ctxT(t), held.HoldID, held.ArgsDigest, "ok")
	require.NoError(t, err)
	start := time.Now()
	out, err := c.Submit(ctxT(t), req)
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State)
	assert.Less(t, time.Since(start), 10*time.Second, "answered, not polled (the poll interval is a minute)")
}

// grantAndRun submits req through c, which the policy holds, grants the
// hold, and waits until the op has completed.
func grantAndRun(t *testing.T, a *app.App, c *producers.Client, counter *testexec.Counter, req events.Request) (producers.Outcome, *events.Op) {
	t.Helper()
	held := submitHeld(t, c, counter, req)
	waitHeldInProjection(t, a, held.OpID)
	_, err := approverAs(t, a, "approver").Grant(ctxT(t), held.HoldID, held.ArgsDigest, "fine")
	require.NoError(t, err)
	done := waitTerminal(t, a, held.OpID)
	require.Equal(t, events.StateCompleted, done.State)
	return held, done
}

// A retry of a granted op that already ran is answered from the op's
// stored outcome and its kept result at once: the runner's reply went to
// the first submit's wait, and no other is coming to wait for.
func TestRetryOfARunGrantIsAnsweredAtOnce(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
	c := agentClient(t, a)
	req := events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"file":"b.txt"}`)}
	held, done := grantAndRun(t, a, c, counter, req)
	// An agent retries later than a reply takes (the wait gives a reply
	// that may be in flight 100 ms), from another client (a restarted
	// agent): no reply was kept for it (see
	// TestRetryJustAfterAGrantedRunTakesTheKeptReply).
	time.Sleep(150 * time.Millisecond)

	start := time.Now()
	out, err := agentClient(t, a).Submit(ctxT(t), req)
	took := time.Since(start)
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State)
	assert.Equal(t, done.ResultDigest, out.ResultDigest)
	// The kept result was fetched: it is sealed to the agent's key, which
	// this client was not given.
	assert.Equal(t, events.CodeNoCredential, out.ResultCode, "%+v", out)
	assert.Less(t, took, producers.ResultGrace/2, "the retry waited for a reply that was not coming")
	assert.Equal(t, 1, executions(t, counter, held.OpID))
}

// An agent that retries the moment its granted op has run (its runner's
// reply, with the result, reached the client before the retry began to
// wait) is answered at once from the reply its client kept, not after
// waiting ResultGrace for a reply that already came.
func TestRetryJustAfterAGrantedRunTakesTheKeptReply(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
	c := agentClient(t, a)
	req := events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"file":"c.txt"}`)}
	held, done := grantAndRun(t, a, c, counter, req)

	start := time.Now()
	out, err := c.Submit(ctxT(t), req)
	took := time.Since(start)
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State)
	assert.Equal(t, done.ResultDigest, out.ResultDigest)
	// The runner's reply carried the result, which a read of the op or a
	// fetch of the kept result (sealed to a key this client was not
	// given) could not: the answer is the reply the client kept.
	assert.JSONEq(t, `{"file":"c.txt"}`, string(out.Result), "%+v", out)
	assert.Empty(t, out.ResultCode)
	assert.Less(t, took, producers.ResultGrace/2, "the retry waited for a reply that had come")
	assert.Equal(t, 1, executions(t, counter, held.OpID))
}

// A process that stops while a granted op it started runs (ADR 0029)
// lets the op end and stores its outcome first, then acks the grant.
func TestShutdownLetsResumedOpEnd(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	counter := &testexec.Counter{Dir: t.TempDir(), Delay: time.Second}
	a, err := app.Start(context.Background(), app.Config{DataDir: t.TempDir(), NATSURL: n.Server.ClientURL(), Policy: confirmSpec(), Executors: []executor.Executor{counter}})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped { // a require failed before the shutdown under test
			_ = a.Shutdown(context.Background())
		}
	})
	c, err := producers.New(n.Conn)
	require.NoError(t, err)
	ap, err := producers.NewApprover(n.Conn, "approver")
	require.NoError(t, err)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"stop":1}`)})
	ctx := ctxT(t)
	_, err = ap.Resolve(ctx, "review", events.Resolution{HoldID: held.HoldID, ArgsDigest: held.ArgsDigest, Decision: events.DecisionGrant, Reason: "go"})
	require.NoError(t, err)
	waitRunning(t, counter, held.OpID)

	stopped = true
	require.NoError(t, a.Shutdown(ctx))
	ranOnceAfterGrant(t, counter, n.JetStream, held.OpID)
	waitSettled(t, n.JetStream, streams.Ops, streams.ResumeConsumer, "and the grant is acked")
}

// A held op's request that a crash left in AIRLOCK_REQUESTS (held event
// stored, its move to AIRLOCK_HELD not done), delivered again once the op
// was granted and before the grant's resume, is moved before it is
// acked: acked where it was, a purge of the requests stream takes it
// (the gate has settled it, and no ready or executing op bounds it), and
// the resume finds the args nowhere (RESUME_DENIED, REQUEST_UNAVAILABLE;
// found by the cluster chaos test with grants).
func TestGrantedOpsRequestDeliveredAgainIsMoved(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx := ctxT(t)
	js := n.JetStream
	req := events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"moved":1}`)}
	ack, err := js.PublishMsg(ctx, requestMsg(t, req), jetstream.WithMsgID(req.FingerprintHex()))
	require.NoError(t, err)
	opID, _ := heldAndGranted(t, js, req, ack.Sequence)
	// The grant's resume is late: its delivery is in another's hand.
	resume, err := js.CreateOrUpdateConsumer(ctx, streams.Ops, jetstream.ConsumerConfig{
		Durable: streams.ResumeConsumer, FilterSubject: events.GrantedSubjects, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Minute, MaxDeliver: -1, MaxAckPending: gate.ResumeMaxAckPending,
	})
	require.NoError(t, err)
	batch, err := resume.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var grant jetstream.Msg
	for m := range batch.Messages() {
		grant = m
	}
	require.NotNil(t, grant, "the grant's delivery")

	counter := &testexec.Counter{Dir: t.TempDir()}
	a := apptest.StartApp(t, app.Config{DataDir: t.TempDir(), NATSURL: n.Server.ClientURL(), Policy: confirmSpec(), Executors: []executor.Executor{counter}})
	require.Eventually(t, func() bool {
		gateCons, err := js.Consumer(ctx, streams.Requests, streams.GateConsumer)
		if err != nil {
			return false
		}
		info, err := gateCons.Info(ctx)
		return err == nil && info.AckFloor.Stream >= ack.Sequence
	}, 10*time.Second, 10*time.Millisecond, "the request is settled")
	held, err := js.Stream(ctx, streams.Held)
	require.NoError(t, err)
	_, err = held.GetLastMsgForSubject(ctx, events.HeldSubject(opID))
	require.NoError(t, err, "the request is in AIRLOCK_HELD before it is acked")
	reqs, err := js.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	_, err = reqs.GetMsg(ctx, ack.Sequence)
	assert.ErrorIs(t, err, jetstream.ErrMsgNotFound, "and gone from AIRLOCK_REQUESTS")
	entries, _ := a.GateKept()
	assert.Zero(t, entries, "the gate keeps no copy of the args of a request delivered again")

	// The resume, once the grant comes back, finds it and runs the op.
	require.NoError(t, grant.Nak())
	assert.Equal(t, events.StateCompleted, waitTerminal(t, a, opID).State)
	assert.Equal(t, 1, executions(t, counter, opID))
}

// An op started through its grant's delivery (ADR 0029) whose process
// died, and whose request is gone by the time the grant comes back: the
// recovery ends it, from the executor's records or REQUEST_UNAVAILABLE
// when the lost attempt took no effect, rather than waiting for args no
// read will find.
func TestResumedOpWhoseRequestIsGoneEnds(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	ctx := ctxT(t)
	js := n.JetStream
	req := events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"gone":1}`)}
	// The request message was at sequence 7 of AIRLOCK_REQUESTS, and its
	// held copy in AIRLOCK_HELD; neither is there any more.
	opID, grantedSeq := heldAndGranted(t, js, req, 7)
	fp, _ := req.Identity()
	sum := &events.Summary{Fingerprint: fp, Agent: req.Agent, Tool: req.Tool, Class: "write", ArgsDigest: events.ArgsDigest(req.Args), RequestSeq: 7}
	hdr := events.OpHeader{OpID: opID, Workspace: req.Workspace}
	op := oplog.Op{Workspace: req.Workspace, ID: opID, Tool: req.Tool}
	ops, err := js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	w := testenv.Writer(t, js)
	// A process that is gone started it through the grant's delivery.
	_, err = w.Append(ctx, ops, op, grantedSeq, events.TypeStarted, "airlock/gate", &events.Started{
		OpHeader: hdr, Attempt: nuid.Next(),
		Decision: &events.Decided{OpHeader: hdr, Request: sum, PolicyHash: events.Digest([]byte("policy")), Rule: "confirm", Mode: "confirm", Reason: "granted by approver: ok"},
		Claim: &events.Claim{Executor: "count", WorkSeq: grantedSeq, Delivery: 1, Consumer: streams.ResumeConsumer,
			Runner: nuid.Next(), Instance: "0123456789abcdef", Host: "host-gone"},
	})
	require.NoError(t, err)

	counter := &testexec.Counter{Dir: t.TempDir()}
	a := apptest.StartApp(t, app.Config{DataDir: t.TempDir(), NATSURL: n.Server.ClientURL(), Policy: confirmSpec(), Executors: []executor.Executor{counter}})
	got := waitTerminal(t, a, opID)
	assert.Equal(t, events.StateFailed, got.State)
	assert.Equal(t, events.CodeRequestUnavailable, got.ErrorCode)
	assert.Zero(t, executions(t, counter, opID), "nothing runs without its args")
	recovered, err := os.ReadFile(filepath.Join(counter.Dir, "RECOVERED"))
	require.NoError(t, err, "the executor's recovery judged the lost attempt")
	assert.Contains(t, string(recovered), opID)
}

// heldAndGranted stores the held and granted events of req's op, whose
// request message is at requestSeq of AIRLOCK_REQUESTS, as the gate and
// an approver would, and returns the op's id and the granted event's
// sequence.
func heldAndGranted(t *testing.T, js jetstream.JetStream, req events.Request, requestSeq uint64) (string, uint64) {
	t.Helper()
	ctx := ctxT(t)
	fp, opID := req.Identity()
	sum := &events.Summary{Fingerprint: fp, Agent: req.Agent, Tool: req.Tool, Class: "write", ArgsDigest: events.ArgsDigest(req.Args), RequestSeq: requestSeq}
	hdr := events.OpHeader{OpID: opID, Workspace: req.Workspace}
	op := oplog.Op{Workspace: req.Workspace, ID: opID, Tool: req.Tool}
	ops, err := js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	w := testenv.Writer(t, js)
	heldSeq, err := w.Append(ctx, ops, op, 0, events.TypeHeld, "airlock/gate", &events.Held{OpHeader: hdr, Request: sum,
		HoldID: events.HoldID(opID), ArgsDigest: sum.ArgsDigest, ExpiresAt: time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond), Reason: "needs approval",
		PolicyHash: events.Digest([]byte("policy")), Mode: "confirm"})
	require.NoError(t, err)
	grantedSeq, err := w.Append(ctx, ops, op, heldSeq, events.TypeGranted, "airlock/gate",
		&events.Granted{OpHeader: hdr, HoldID: events.HoldID(opID), ArgsDigest: sum.ArgsDigest, Approver: "approver", Reason: "ok"})
	require.NoError(t, err)
	return opID, grantedSeq
}
