package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fill runs ops through a whole Airlock on n and stops it, leaving the
// stream behind: completed, denied and rejected requests.
func fill(t testing.TB, n *testenv.NATS, ops int) {
	t.Helper()
	a := apptest.StartApp(t, app.Config{NATSURL: n.Server.ClientURL(), Policy: policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"locked": {Mode: "locked"}}}})
	c, nc := apptest.Client(t, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range ops {
		ws := "open"
		if i%5 == 0 {
			ws = "locked"
		}
		tool := "echo"
		if i%7 == 0 {
			tool = "nothing_serves_this"
		}
		_, err := c.Submit(ctx, events.Request{Workspace: ws, Agent: "a", Tool: tool, Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		require.NoError(t, err)
		if i%10 == 0 {
			require.NoError(t, nc.Publish(events.RequestSubject("open", "a"), []byte("not a cloudevent")))
		}
	}
	require.NoError(t, a.Shutdown(ctx))
}

// lastOpSeq is the sequence of the newest message the projector reads.
func lastOpSeq(t testing.TB, n *testenv.NATS) uint64 {
	t.Helper()
	st, err := n.JetStream.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	raw, err := st.GetLastMsgForSubject(context.Background(), events.OpSubjects)
	require.NoError(t, err)
	return raw.Sequence
}

// project applies the stream to the store in dir until seq, or until stop
// says so after a batch, and closes the store as a crash would leave it
// (no flush beyond what each batch committed).
func project(t *testing.T, js jetstream.JetStream, dir string, maxBatch int, until uint64) uint64 {
	t.Helper()
	return projectWith(t, projector.Config{JetStream: js, MaxBatch: maxBatch}, dir, until).Applied()
}

// projectWith runs a projector of cfg over the store in dir until it has
// applied until, and stops it cleanly.
func projectWith(t *testing.T, cfg projector.Config, dir string, until uint64) *projector.Projector {
	t.Helper()
	st, err := store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	cfg.Store = st
	p, err := projector.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	require.NoError(t, p.WaitApplied(wctx, until))
	cancel()
	require.NoError(t, <-done)
	return p
}

func dump(t *testing.T, dir string) ([]*events.Op, uint64) {
	t.Helper()
	st, err := store.Open(dir)
	require.NoError(t, err)
	defer st.Close()
	var all []*events.Op
	cursor := ""
	for {
		page, next, err := st.List(events.StateNew, "", cursor, 17)
		require.NoError(t, err)
		all = append(all, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	applied, err := st.Applied()
	require.NoError(t, err)
	return all, applied
}

func TestRestartMidStreamMatchesUninterrupted(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	fill(t, n, 120)
	last := lastOpSeq(t, n)

	whole := t.TempDir()
	project(t, n.JetStream, whole, 1024, last)

	// Stop and restart the projector at several points, with small
	// batches so the stops fall between many of them.
	pieces := t.TempDir()
	for _, at := range []uint64{last / 5, last / 3, last / 2, last - 3} {
		project(t, n.JetStream, pieces, 7, at)
	}
	project(t, n.JetStream, pieces, 7, last)

	want, wantApplied := dump(t, whole)
	got, gotApplied := dump(t, pieces)
	require.Len(t, want, 120)
	assert.Equal(t, wantApplied, gotApplied)
	assert.Equal(t, want, got)

	states := map[events.State]int{}
	for _, op := range want {
		states[op.State]++
	}
	assert.Equal(t, map[events.State]int{events.StateCompleted: 102, events.StateDenied: 18}, states)

	// By-state pages agree with the full listing.
	st, err := store.Open(whole)
	require.NoError(t, err)
	defer st.Close()
	for state, count := range states {
		ops, next, err := st.List(state, "", "", 1000)
		require.NoError(t, err)
		assert.Empty(t, next)
		assert.Len(t, ops, count, state)
	}
}

// Events that do not belong where they are stored are counted and passed
// over; the op they claim to change keeps its state.
func TestForgedEventsAreSkipped(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	fill(t, n, 3)
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	require.NoError(t, p.WaitApplied(wctx, lastOpSeq(t, n)))
	ops, _, err := st.List(events.StateCompleted, "", "", 10)
	require.NoError(t, err)
	require.NotEmpty(t, ops)
	victim := ops[0]
	require.Zero(t, p.Anomalies())

	forge := func(subject string, t2 events.Type, data any) uint64 {
		ev, err := events.NewEvent(t2, "forger", victim.ID, data)
		require.NoError(t, err)
		ack, err := n.JetStream.PublishMsg(ctx, events.Encode(subject, ev))
		require.NoError(t, err)
		return ack.Sequence
	}
	hdr := events.OpHeader{OpID: victim.ID, Workspace: victim.Workspace}
	// A first event on a fresh subject of another tool, claiming the op.
	forge(events.OpEventSubject(victim.Workspace, victim.ID, "other", events.TypeDecided), events.TypeDecided,
		&events.Decided{OpHeader: hdr, Request: &events.Summary{Tool: "other"}})
	// An event whose data names the op but whose subject names another.
	forge(events.OpEventSubject(victim.Workspace, "op_00000000000000000000000000000001", victim.Tool, events.TypeFailed), events.TypeFailed,
		&events.Failed{OpHeader: hdr, Code: events.CodeExecutorFailed})
	// A verb that does not match the type.
	last := forge(events.OpEventSubject(victim.Workspace, victim.ID, victim.Tool, events.TypeScrubbed), events.TypeFailed,
		&events.Failed{OpHeader: hdr, Code: events.CodeExecutorFailed})
	require.NoError(t, p.WaitApplied(wctx, last))
	assert.Equal(t, uint64(3), p.Anomalies())
	after, err := st.Op(victim.ID)
	require.NoError(t, err)
	assert.Equal(t, victim, after)
}

// Checkpoints signed when no message comes (idle, and at a clean stop)
// apply nothing: the applied sequence stays where the last event left it,
// and every leaf ends up signed.
func TestIdleCheckpointKeepsApplied(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	fill(t, n, 12)
	last := lastOpSeq(t, n)
	st, err := store.Open(t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	key, _, err := audit.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st, AuditKey: key, CheckpointInterval: 20 * time.Millisecond, CheckpointEvery: 1 << 20})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	require.NoError(t, p.WaitApplied(wctx, last))
	require.Eventually(t, func() bool { c := p.Latest(); return c != nil && c.Size == int64(last) }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, last, p.Applied(), "an idle checkpoint applies nothing")
	require.NoError(t, p.WaitApplied(wctx, last), "and WaitApplied still returns")
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, last, p.Applied())
	rep, err := audit.Verify(st, audit.Options{Verifier: key.Verifier})
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Problems)
	assert.Equal(t, int64(last), rep.CheckpointSize)
}

// commits counts the projector's commits that applied transitions.
type commits struct {
	mu    sync.Mutex
	sizes []int
}

func (c *commits) Applied(ts []projector.Transition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sizes = append(c.sizes, len(ts))
}

func (c *commits) get() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sizes)
}

// A trickle of events is committed in one batch when the projector
// lingers for more, and in about one batch each when it does not. The
// first event, on an idle stream, is applied at once either way.
func TestLingerGathersATrickleIntoOneBatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		linger time.Duration
		check  func(t *testing.T, sizes []int)
	}{
		{"lingering", 2 * time.Second, func(t *testing.T, sizes []int) {
			assert.LessOrEqual(t, len(sizes), 2, "batches %v", sizes)
		}},
		{"not lingering", -1, func(t *testing.T, sizes []int) {
			assert.GreaterOrEqual(t, len(sizes), 10, "batches %v", sizes)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testenv.StartNATS(t, streams.Config{})
			st, err := store.Open(t.TempDir())
			require.NoError(t, err)
			defer st.Close()
			var seen commits
			p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st, Linger: tc.linger, Observer: &seen})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			defer func() { cancel(); require.NoError(t, <-done) }()
			ops, err := n.JetStream.Stream(ctx, streams.Ops)
			require.NoError(t, err)
			var last uint64
			for i := range 20 {
				op := oplog.Op{Workspace: "w", ID: fmt.Sprintf("op_%032x", i), Tool: "echo"}
				last, err = testenv.Writer(t, n.JetStream).Append(ctx, ops, op, 0, events.TypeDecided, "test",
					&events.Decided{OpHeader: events.OpHeader{OpID: op.ID, Workspace: "w"}, Request: &events.Summary{Tool: "echo"}})
				require.NoError(t, err)
				if i == 0 {
					fctx, fcancel := context.WithTimeout(ctx, time.Second)
					require.NoError(t, p.WaitApplied(fctx, last), "an idle stream's event waits for no linger")
					fcancel()
				}
				time.Sleep(5 * time.Millisecond)
			}
			wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
			defer wcancel()
			require.NoError(t, p.WaitApplied(wctx, last))
			sizes := seen.get()
			total := 0
			for _, s := range sizes {
				total += s
			}
			assert.Equal(t, 20, total)
			tc.check(t, sizes)
		})
	}
}
