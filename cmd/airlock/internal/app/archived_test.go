package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/testexec"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// archiving is an app config whose ops stream lets ended ops leave it
// for the archive a second after they are applied.
func archiving(cfg app.Config) app.Config {
	cfg.Streams.PurgeOps = true
	cfg.Streams.Duplicates = 200 * time.Millisecond
	cfg.ArchiveAfter = time.Second
	return cfg
}

// gone waits until the ops stream holds no event of op: it went to the
// archive.
func gone(t *testing.T, a *app.App, ws, op string) {
	t.Helper()
	ops, err := a.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := oplog.Last(context.Background(), ops, ws, op)
		return err != nil && err == oplog.ErrEmpty
	}, 15*time.Second, 50*time.Millisecond, "op %s left the ops stream", op)
}

// archivedCount runs one count op with args {"x":x} through a to its
// end and waits until its events left the ops stream; it returns the
// request and the op's outcome.
func archivedCount(t *testing.T, a *app.App, c *producers.Client, x int) (events.Request, producers.Outcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := events.Request{Workspace: "ws", Agent: "ag", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"x":%d}`, x))}
	first, err := c.Submit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, first.State)
	gone(t, a, "ws", first.OpID)
	return req, first
}

// A retry of an op whose events left the ops stream for the archive finds
// nothing under the op's subjects, so its first event is stored; it is
// ended with the archived outcome, stated again, before anything runs,
// and the retry gets the outcome the op had: the same op, completed, its
// kept result. Whether the gate starts the op itself or decides it for
// the executors, it ran once.
func TestRetryOfAnArchivedOpRunsNothing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		decidesAll bool
	}{{"started by the gate", false}, {"decided for the executors", true}} {
		t.Run(tc.name, func(t *testing.T) {
			a, counter := countingApp(t, archiving(app.Config{GateDecidesAll: tc.decidesAll}))
			c, _ := apptest.Client(t, a.ClientURL())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, first := archivedCount(t, a, c, 3)
			before := waitTerminal(t, a, first.OpID)

			for i := range 2 {
				again, err := c.Submit(ctx, req)
				require.NoError(t, err, "retry %d", i)
				assert.Equal(t, first.OpID, again.OpID)
				assert.Equal(t, events.StateCompleted, again.State, "retry %d", i)
				assert.Equal(t, string(first.Result), string(again.Result), "retry %d: the kept result", i)
				assert.Equal(t, first.ResultDigest, again.ResultDigest)
				assert.Equal(t, 1, executions(t, counter, first.OpID), "retry %d ran nothing", i)
			}
			// The retry's first event, and the outcome stated again; the
			// second retry found them and appended nothing.
			evs := testenv.OpEvents(t, a.JetStream, "ws", first.OpID)
			require.Len(t, evs, 2, "%v", evs)
			assert.Equal(t, events.TypeCompleted, evs[1])
			ops, err := a.JetStream.Stream(ctx, streams.Ops)
			require.NoError(t, err)
			last, err := oplog.Last(ctx, ops, "ws", first.OpID)
			require.NoError(t, err)
			assert.NotEmpty(t, last.Header.Get(events.HeaderRestates))

			// The projection keeps the op as the archive has it.
			require.NoError(t, a.Projector.WaitApplied(ctx, last.Seq))
			after, err := a.Store.Op(first.OpID)
			require.NoError(t, err)
			assert.Equal(t, before.State, after.State)
			assert.Equal(t, before.FirstSeq, after.FirstSeq)
			assert.Equal(t, 1, after.Attempts)
			assert.Equal(t, before.ResultSeq, after.ResultSeq)
			assert.Equal(t, last.Seq, after.Version, "the next transition expects the outcome stated again")
		})
	}
}

// A kept result is erased when its time comes, though the op's events
// left the ops stream before: the erasure is stored after what the stream
// holds of the op now (nothing), and folded into the op. A retry after it
// gets the op's outcome.
func TestResultOfAnArchivedOpIsErasedInTime(t *testing.T) {
	a, counter := countingApp(t, archiving(app.Config{ResultTTL: 8 * time.Second, HoldExpiryInterval: 100 * time.Millisecond}))
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, first := archivedCount(t, a, c, 4)
	op, err := a.Store.Op(first.OpID)
	require.NoError(t, err)
	require.Empty(t, op.ResultErased, "archived before its result's time")
	require.Eventually(t, func() bool {
		op, err := a.Store.Op(first.OpID)
		return err == nil && op.ResultErased == events.ErasedExpired
	}, 15*time.Second, 50*time.Millisecond)

	// A retry now finds only the erasure under the op's subjects: it is
	// answered from the projection, runs nothing, and its copy of the
	// args goes.
	again, err := c.Submit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first.OpID, again.OpID)
	assert.Equal(t, events.StateCompleted, again.State)
	assert.Equal(t, first.ResultDigest, again.ResultDigest)
	assert.Equal(t, 1, executions(t, counter, first.OpID))
	reqs, err := a.JetStream.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := reqs.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, 10*time.Second, 50*time.Millisecond, "the retry's request is erased")
}

// A process that did not see an op before it left the stream (a new one,
// its projection rebuilt from the archive) answers a retry of it with its
// outcome, and runs nothing.
func TestRetryThroughAProcessThatCameAfterTheArchive(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	counter := &testexec.Counter{Dir: t.TempDir()}
	dirs := testenv.DeploymentDirs(t)
	cfg := archiving(app.Config{NATSURL: n.Server.ClientURL(), Executors: []executor.Executor{counter}})
	cfg.DataDir = dirs()
	a := apptest.StartApp(t, cfg)
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, first := archivedCount(t, a, c, 5)
	require.NoError(t, a.Shutdown(ctx))

	cfg.DataDir = dirs()
	b := apptest.StartApp(t, cfg)
	cb, _ := apptest.Client(t, b.ClientURL())
	again, err := cb.Submit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first.OpID, again.OpID)
	assert.Equal(t, events.StateCompleted, again.State)
	assert.Equal(t, first.ResultDigest, again.ResultDigest)
	assert.Equal(t, 1, executions(t, counter, first.OpID))
	assert.Positive(t, b.Projector.Filled(), "the new process read the op from the archive")
}

// Settle holds a retry until the projection has folded everything below
// the newest ops floor: before, the archived op is unknown to it; after,
// it is the op the retry duplicates.
func TestSettleWaitsForTheProjectionToReachTheFloor(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	cfg := archiving(app.Config{NATSURL: n.Server.ClientURL()})
	a, _ := countingApp(t, cfg)
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, first := archivedCount(t, a, c, 6)
	require.NoError(t, a.Shutdown(ctx))

	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st, Archive: archive.New(n.JetStream)})
	require.NoError(t, err)
	x := projector.NewArchived(p, st, n.JetStream, 0)
	op, err := x.Duplicate(first.OpID, 1<<40)
	require.NoError(t, err)
	require.Nil(t, op, "not folded yet")

	settled := make(chan error, 1)
	go func() { settled <- x.Settle(ctx, time.Now(), 1<<40) }()
	select {
	case err := <-settled:
		t.Fatalf("settled before the projection reached the floor: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	require.NoError(t, <-settled)
	op, err = x.Duplicate(first.OpID, 1<<40)
	require.NoError(t, err)
	require.NotNil(t, op)
	assert.Equal(t, events.StateCompleted, op.State)
	pcancel()
	require.NoError(t, <-done)
}

// A settle needs no read of the ops floor once the projection has applied
// every message below the events it is asked about: an op whose events
// left before those were stored is in it (ADR 0028). Below that, the
// floor is read, and waited for.
func TestSettleNeedsNoReadOncePastTheEvents(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	arch := archive.New(n.JetStream)
	p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st, Archive: arch})
	require.NoError(t, err)
	x := projector.NewArchived(p, st, n.JetStream, 0)
	// Another process raised the floor far above this projection, which
	// has applied nothing.
	require.NoError(t, arch.RaiseFloor(ctx, 1<<40))
	require.Zero(t, p.Applied())

	require.NoError(t, x.Settle(ctx, time.Now(), 1), "the first message: nothing below it to wait for")
	_, answered := x.Settles()
	assert.Equal(t, uint64(1), answered)

	// Three messages applied: events at 4 need no read; at 5, one.
	for range 3 {
		_, err := n.JetStream.Publish(ctx, events.ModeSubject("ws"), []byte(`{}`))
		require.NoError(t, err)
	}
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	require.NoError(t, p.WaitApplied(ctx, 3))
	require.NoError(t, x.Settle(ctx, time.Now(), 4))
	_, answered = x.Settles()
	assert.Equal(t, uint64(2), answered)
	for _, upTo := range []uint64{0, 5, 1 << 30} {
		sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = x.Settle(sctx, time.Now(), upTo)
		scancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, "up to %d: the floor is read, and waited for", upTo)
	}
	read, answered := x.Settles()
	assert.Equal(t, uint64(2), answered)
	assert.Equal(t, uint64(3), read)
	pcancel()
	require.NoError(t, <-done)
}

// The purges of a stream made with an ArchiveKeep leave that many of its
// newest messages, as the purger's projection has applied them (ADR
// 0030): ended ops past --archive-after stay while they are among them,
// and leave once enough came after.
func TestPurgesKeepTheNewestMessages(t *testing.T) {
	const keep = 40
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true, ArchiveKeep: keep})
	a, counter := countingApp(t, archiving(app.Config{NATSURL: n.Server.ClientURL()}))
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ops, err := n.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	run := func(x int) string {
		out, err := c.Submit(ctx, events.Request{Workspace: "ws", Agent: "ag", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"keep":%d}`, x))})
		require.NoError(t, err)
		require.Equal(t, events.StateCompleted, out.State)
		return out.OpID
	}
	first := run(0)
	for i := 1; i < keep; i++ {
		run(i)
	}
	gone(t, a, "ws", first)
	floor := a.OpsPurgedBelow()
	assert.LessOrEqual(t, floor+keep, a.Projector.Applied()+1, "a purge leaves the newest %d messages", keep)
	// A retry of the archived op runs nothing; its settle reads no floor.
	read, answered := a.Settles()
	again, err := c.Submit(ctx, events.Request{Workspace: "ws", Agent: "ag", Tool: "count", Args: json.RawMessage(`{"keep":0}`)})
	require.NoError(t, err)
	assert.Equal(t, first, again.OpID)
	assert.Equal(t, events.StateCompleted, again.State)
	assert.Equal(t, 1, executions(t, counter, first))
	readAfter, answeredAfter := a.Settles()
	assert.Equal(t, read, readAfter, "no settle read the floor")
	assert.Greater(t, answeredAfter, answered)

	// The last op ended well over --archive-after ago, and is still among
	// the newest messages: it stays, until enough come after it.
	last := run(keep)
	time.Sleep(3 * time.Second)
	_, err = oplog.Last(ctx, ops, "ws", last)
	require.NoError(t, err, "kept: among the newest %d messages", keep)
	assert.LessOrEqual(t, a.OpsPurgedBelow()+keep, a.Projector.Applied()+1)
	for i := keep + 1; i < 2*keep; i++ {
		run(i)
	}
	gone(t, a, "ws", last)
}

// archivedOf is a projection and its Archived with keep on n's streams,
// and a way to run its projector until the test ends; another process's
// purges are played by raising the floor.
func archivedOf(t *testing.T, n *testenv.NATS, keep uint64) (*projector.Projector, *projector.Archived, *archive.Archive, func()) {
	t.Helper()
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	arch := archive.New(n.JetStream)
	p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st, Archive: arch})
	require.NoError(t, err)
	run := func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	return p, projector.NewArchived(p, st, n.JetStream, keep), arch, run
}

// publish stores k records of controls in the ops stream.
func publish(t *testing.T, n *testenv.NATS, k int) {
	t.Helper()
	for range k {
		_, err := n.JetStream.Publish(context.Background(), events.ModeSubject("ws"), []byte(`{}`))
		require.NoError(t, err)
	}
}

// settleWithin settles up to upTo, giving up after 200 ms (a settle that
// reads the floor waits for the projection to reach it).
func settleWithin(x *projector.Archived, upTo uint64, through bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if through {
		return x.SettleThrough(ctx, time.Now(), upTo)
	}
	return x.Settle(ctx, time.Now(), upTo)
}

// With an ArchiveKeep, a settle reads nothing while the projection is
// within that many messages of the events it is asked about: a purge
// before them left at least that many (ADR 0030). Farther, the floor is
// read, and waited for; so it is for SettleThrough, whose events may
// have been stored before their ops' events left.
func TestSettleNeedsNoReadWithinTheKeep(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	const keep = 10
	p, x, arch, run := archivedOf(t, n, keep)
	require.Zero(t, p.Applied())
	require.NoError(t, settleWithin(x, keep+1, false), "within the keep of nothing applied")
	// Far above the projection: only a purge that kept less than keep
	// could store it.
	require.NoError(t, arch.RaiseFloor(context.Background(), 1<<40))
	require.NoError(t, settleWithin(x, keep+1, false))
	assert.ErrorIs(t, settleWithin(x, keep+2, false), context.DeadlineExceeded, "one past it: the floor is read, and waited for")
	assert.ErrorIs(t, settleWithin(x, 2, true), context.DeadlineExceeded, "through: no keep")

	publish(t, n, 3)
	run()
	require.NoError(t, p.WaitApplied(context.Background(), 3))
	require.NoError(t, settleWithin(x, 3+keep+1, false))
	assert.ErrorIs(t, settleWithin(x, 3+keep+2, false), context.DeadlineExceeded)
	require.NoError(t, settleWithin(x, 4, true), "through, past everything below")
	read, answered := x.Settles()
	assert.Equal(t, uint64(4), answered)
	assert.Equal(t, uint64(3), read)
}

// Purges made before this process started may have kept less than the
// keep (a deployment that adopted it, with every process stopped): a
// settle within the keep reads nothing only once the projection has
// passed the floor as read after the start.
func TestSettleWithinTheKeepWaitsForTheStartFloor(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	publish(t, n, 4)
	// A purge before this process's start, up to 5.
	require.NoError(t, archive.New(n.JetStream).RaiseFloor(context.Background(), 5))
	p, x, _, run := archivedOf(t, n, 1000)
	assert.ErrorIs(t, settleWithin(x, 6, false), context.DeadlineExceeded, "the projection has not folded what left before the start")
	run()
	require.NoError(t, p.WaitApplied(context.Background(), 4))
	require.NoError(t, settleWithin(x, 6, false))
	require.NoError(t, settleWithin(x, 900, false))
	read, answered := x.Settles()
	assert.Equal(t, uint64(2), answered)
	assert.Equal(t, uint64(1), read)
}

// With a keep, CatchUp reads the floor again when the projection is more
// than keep behind the newest events settled: the floor read last may be
// old, since settles rarely read.
func TestCatchUpReadsAgainWhenFarBehind(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	_, x, arch, _ := archivedOf(t, n, 10)
	ctx := context.Background()
	require.NoError(t, x.CatchUp(ctx), "no floor yet")
	require.NoError(t, settleWithin(x, 100, false), "read: no floor yet, nothing to wait for")
	require.NoError(t, arch.RaiseFloor(ctx, 50))
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, x.CatchUp(cctx), context.DeadlineExceeded, "the new floor is read, and waited for")
}

// archivedHold is a held count op of an archiving Airlock with auth,
// granted, completed once and gone to the archive.
type archivedHold struct {
	a       *app.App
	counter *testexec.Counter
	c       *producers.Client
	req     events.Request
	held    producers.Outcome
	heldEv  *oplog.Event // its held event, as stored
}

// newArchivedHold runs a held count op with args {"archived":x} to its
// end, and until its events left the ops stream.
func newArchivedHold(t *testing.T, x int) archivedHold {
	t.Helper()
	a, counter := holdsApp(t, archiving(app.Config{}))
	h := archivedHold{a: a, counter: counter, c: agentClient(t, a)}
	h.req = events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"archived":%d}`, x))}
	h.held = submitHeld(t, h.c, counter, h.req)
	waitHeldInProjection(t, a, h.held.OpID)
	ctx := ctxT(t)
	ops, err := a.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	h.heldEv, err = oplog.LastOf(ctx, ops, oplog.Op{Workspace: "review", ID: h.held.OpID, Tool: "count"}, events.TypeHeld)
	require.NoError(t, err)
	_, err = approverAs(t, a, "approver").Grant(ctx, h.held.HoldID, h.held.ArgsDigest, "once")
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, waitTerminal(t, a, h.held.OpID).State)
	gone(t, a, "review", h.held.OpID)
	require.Equal(t, 1, executions(t, counter, h.held.OpID))
	return h
}

// A retry of an archived held op whose held event was stored, but which
// its gate could not end with the archived outcome (here the archive is
// unreadable), is a pending hold in the ops stream; a grant of it is
// recorded, and the gate that takes the grant's delivery and would start
// the op (ADR 0029) must first tell it from a new op, as the runners do
// with a decided one. The op ran once.
func TestGrantOfARetryOfAnArchivedOpRunsNothing(t *testing.T) {
	h := newArchivedHold(t, 1)
	a, c, req, held, ctx := h.a, h.c, h.req, h.held, ctxT(t)

	// The archive unreadable: the retry's held event is stored, and its
	// gate cannot tell it from a new op.
	require.NoError(t, a.JetStream.DeleteStream(ctx, streams.Archive))
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, _ = c.Submit(sctx, req)
	cancel()
	ops, err := a.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		last, err := oplog.Last(ctx, ops, "review", held.OpID)
		return err == nil && last.Type == events.TypeHeld
	}, 10*time.Second, 20*time.Millisecond, "the retry's held event is stored")

	_, err = approverAs(t, a, "approver").Grant(ctx, held.HoldID, held.ArgsDigest, "again")
	require.NoError(t, err, "recorded: the hold is pending in the stream")
	time.Sleep(3 * time.Second)
	assert.Equal(t, 1, executions(t, h.counter, held.OpID), "the retry of an archived op runs nothing")
}

// The same, where the archive is readable: the gate that takes the
// grant's delivery ends the retry with the archived outcome, stated
// again, and answers with it; nothing runs. The retry's held event is
// stored here as a gate stores one, with the gate's consumer of requests
// paused so that no gate ends the retry first.
func TestGrantOfARetryOfAnArchivedOpIsAnsweredFromTheArchive(t *testing.T) {
	h := newArchivedHold(t, 2)
	a, c, req, held, ctx := h.a, h.c, h.req, h.held, ctxT(t)
	ops, err := a.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	op := oplog.Op{Workspace: "review", ID: held.OpID, Tool: "count"}

	// The retry's request is stored and not taken; its held event, as
	// its gate would store it, is the op's first event again.
	_, err = a.JetStream.PauseConsumer(ctx, streams.Requests, streams.GateConsumer, time.Now().Add(time.Hour))
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	_, _ = c.Submit(sctx, req)
	cancel()
	requests, err := a.JetStream.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	info, err := requests.Info(ctx)
	require.NoError(t, err)
	again := *h.heldEv.Data.(*events.Held)
	summary := *again.Request
	summary.RequestSeq = info.State.LastSeq
	again.Request, again.ExpiresAt = &summary, time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	_, err = testenv.Writer(t, a.JetStream).Append(ctx, ops, op, 0, events.TypeHeld, "airlock/gate", &again)
	require.NoError(t, err)

	_, err = approverAs(t, a, "approver").Grant(ctx, held.HoldID, held.ArgsDigest, "again")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		last, err := oplog.Last(ctx, ops, "review", held.OpID)
		return err == nil && last.Type == events.TypeCompleted && last.Header.Get(events.HeaderRestates) != ""
	}, 10*time.Second, 20*time.Millisecond, "the retry ends with the archived outcome, stated again")
	assert.Equal(t, 1, executions(t, h.counter, held.OpID), "nothing ran")
}

// A resolution of a hold whose op ended and left the ops stream is
// answered as one of a hold whose events are still there: the same
// approver's same grant stands (Existing), a deny is HOLD_RESOLVED, and
// nothing runs again.
func TestResolutionOfAnArchivedHoldIsAnsweredAsBefore(t *testing.T) {
	h := newArchivedHold(t, 3)
	ctx := ctxT(t)
	ap := approverAs(t, h.a, "approver")
	r, err := ap.Grant(ctx, h.held.HoldID, h.held.ArgsDigest, "once")
	require.NoError(t, err)
	assert.True(t, r.Existing, "%+v", r)
	assert.Equal(t, events.StateCompleted, r.State)
	r, err = ap.Deny(ctx, h.held.HoldID, h.held.ArgsDigest, "too late")
	assert.Equal(t, events.CodeHoldResolved, codeOf(err), "%v", err)
	assert.Contains(t, r.Message, "grant by approver")
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, 1, executions(t, h.counter, h.held.OpID))
}
