package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
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
	x := projector.NewArchived(p, st, n.JetStream)
	op, err := x.Duplicate(first.OpID, 1<<40)
	require.NoError(t, err)
	require.Nil(t, op, "not folded yet")

	settled := make(chan error, 1)
	go func() { settled <- x.Settle(ctx, time.Now()) }()
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

// A purge of the ops stream comes archive.PurgeDelay after its floor was
// stored, never sooner: a read of the floor answers for a lease after it
// (ADR 0028), so a purge right after a floor a reader did not see could
// take an op the reader then runs again.
func TestAPurgeWaitsItsDelayAfterItsFloor(t *testing.T) {
	a, _ := countingApp(t, archiving(app.Config{}))
	c, _ := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := events.Request{Workspace: "ws", Agent: "ag", Tool: "count", Args: json.RawMessage(`{"x":8}`)}
	out, err := c.Submit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, out.State)
	ops, err := a.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	last, err := oplog.Last(ctx, ops, "ws", out.OpID)
	require.NoError(t, err)

	var goneAt time.Time
	require.Eventually(t, func() bool {
		_, err := oplog.Last(ctx, ops, "ws", out.OpID)
		goneAt = time.Now()
		return err == oplog.ErrEmpty
	}, 20*time.Second, 10*time.Millisecond, "op %s left the ops stream", out.OpID)

	// The first floor above the op's events is the one its purge waited on.
	arch, err := a.JetStream.Stream(ctx, streams.Archive)
	require.NoError(t, err)
	info, err := arch.Info(ctx)
	require.NoError(t, err)
	var storedAt time.Time
	for seq := uint64(1); seq <= info.State.LastSeq && storedAt.IsZero(); seq++ {
		m, err := arch.GetMsg(ctx, seq)
		if err != nil || m.Subject != events.ArchiveFloorSubject {
			continue
		}
		if f, err := strconv.ParseUint(m.Header.Get(archive.HeaderFloor), 10, 64); err == nil && f > last.Seq {
			storedAt = m.Time
		}
	}
	require.False(t, storedAt.IsZero(), "a floor above the op's events is stored")
	assert.GreaterOrEqual(t, goneAt.Sub(storedAt), archive.PurgeDelay-50*time.Millisecond,
		"the op left %v after the floor that covers it was stored", goneAt.Sub(storedAt))
}

// A read of the ops floor answers a retry's settle for archive.FloorLease
// after it was sent, and no longer: a floor stored meanwhile purges nothing
// before the lease ends (ADR 0028), and the first settle after it reads
// the new floor.
func TestTheFloorIsReadOncePerLease(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	arch := archive.New(n.JetStream)
	p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st, Archive: arch})
	require.NoError(t, err)
	x := projector.NewArchived(p, st, n.JetStream)
	require.NoError(t, x.Settle(ctx, time.Now()), "no floor: nothing to wait for")
	leased := time.Now()

	// Another process raises the floor far above this projection.
	require.NoError(t, arch.RaiseFloor(ctx, 1<<40))
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = x.Settle(sctx, time.Now())
	scancel()
	if time.Since(leased) < archive.FloorLease-200*time.Millisecond {
		require.NoError(t, err, "within the lease, the read before the new floor answers")
	}
	time.Sleep(time.Until(leased.Add(archive.FloorLease)))
	sctx, scancel = context.WithTimeout(ctx, 200*time.Millisecond)
	err = x.Settle(sctx, time.Now())
	scancel()
	assert.ErrorIs(t, err, context.DeadlineExceeded, "past the lease, the new floor is read, and waited for")
}
