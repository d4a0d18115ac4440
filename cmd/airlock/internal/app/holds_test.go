package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/testexec"
	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// confirmSpec puts workspace "review" in confirm mode; every other
// workspace is auto.
func confirmSpec() policy.Spec {
	return policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"review": {Mode: "confirm"}}}
}

// holdsApp starts Airlock with credentials on and the counting executor.
func holdsApp(t *testing.T, cfg app.Config) (*app.App, *testexec.Counter) {
	t.Helper()
	cfg.Auth = true
	if cfg.Policy.Workspaces == nil && cfg.PolicyFile == "" {
		cfg.Policy = confirmSpec()
	}
	return countingApp(t, cfg)
}

// connectAs connects to a as the principal named, with its credential.
func connectAs(t *testing.T, a *app.App, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opt, err := authority.ConnectOption(a.Authority.CredsPath(name))
	require.NoError(t, err)
	nc, err := nats.Connect(a.ClientURL(), append(opts, opt)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func agentClient(t *testing.T, a *app.App) *producers.Client {
	t.Helper()
	c, err := producers.New(connectAs(t, a, "agent"), producers.WithWait(10*time.Second), producers.WithPollInterval(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func approverAs(t *testing.T, a *app.App, name string) *producers.Approver {
	t.Helper()
	seed, err := authority.Seed(a.Authority.CredsPath(name))
	require.NoError(t, err)
	ap, err := producers.NewApprover(connectAs(t, a, name), name, producers.WithApproverKey(seed))
	require.NoError(t, err)
	return ap
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// submitHeld submits req and checks that it is held, not run.
func submitHeld(t *testing.T, c *producers.Client, counter *testexec.Counter, req events.Request) producers.Outcome {
	t.Helper()
	out, err := c.Submit(ctxT(t), req)
	require.NoError(t, err)
	require.Equal(t, events.StateHeld, out.State, "%+v", out)
	assert.Equal(t, events.CodeApprovalRequired, out.Code)
	assert.Equal(t, events.HoldID(out.OpID), out.HoldID)
	canon, err := events.Canonical(req.Args)
	require.NoError(t, err)
	assert.Equal(t, events.ArgsDigest(canon), out.ArgsDigest)
	require.NotNil(t, out.HoldExpiresAt)
	assert.True(t, out.HoldExpiresAt.After(time.Now()))
	assert.Equal(t, 0, executions(t, counter, out.OpID))
	return out
}

// waitHeldInProjection waits until the projection lists the hold.
func waitHeldInProjection(t *testing.T, a *app.App, opID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		op, err := a.Store.Op(opID)
		return err == nil && op.State == events.StateHeld
	}, 10*time.Second, 10*time.Millisecond)
}

func codeOf(err error) events.Code { return events.CodeOf(err) }

func TestConfirmHoldThenGrantRunsOnce(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
	c := agentClient(t, a)
	req := events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"file":"a.txt"}`)}
	held := submitHeld(t, c, counter, req)

	// read tools still run at once in confirm mode.
	out, err := c.Submit(ctxT(t), events.Request{Workspace: "review", Agent: "agent", Tool: "echo", Args: json.RawMessage(`{"r":1}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State)

	waitHeldInProjection(t, a, held.OpID)
	ap := approverAs(t, a, "approver")
	pending, err := ap.ListHolds(ctxT(t), "review")
	require.NoError(t, err)
	require.Len(t, pending, 1)
	assert.Equal(t, held.HoldID, pending[0].HoldID)

	r, err := ap.Grant(ctxT(t), held.HoldID, held.ArgsDigest, "looks right")
	require.NoError(t, err)
	assert.Equal(t, events.StateGranted, r.State)
	assert.False(t, r.Existing)

	got := waitTerminal(t, a, held.OpID)
	require.Equal(t, events.StateCompleted, got.State, got.Error)
	assert.Equal(t, 1, executions(t, counter, held.OpID))
	assert.Equal(t, "approver", got.Approver)
	assert.Equal(t, "grant", got.Resolution)
	assert.Equal(t, events.Digest([]byte(`{"file":"a.txt"}`)), got.ResultDigest)
	assert.Equal(t, []events.Type{events.TypeHeld, events.TypeGranted, events.TypeDecided, events.TypeStarted, events.TypeCompleted},
		testenv.OpEvents(t, a.JetStream, "review", held.OpID))

	// The same grant again (a lost answer) is told it stands; a deny now is
	// refused; the op ran once.
	r, err = ap.Grant(ctxT(t), held.HoldID, held.ArgsDigest, "looks right")
	require.NoError(t, err)
	assert.True(t, r.Existing)
	_, err = ap.Deny(ctxT(t), held.HoldID, held.ArgsDigest, "changed my mind")
	assert.Equal(t, events.CodeHoldResolved, codeOf(err))

	// The submitter's retry now gets the result.
	out, err = c.Submit(ctxT(t), req)
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, out.State)
	assert.Equal(t, held.OpID, out.OpID)
	assert.Equal(t, 1, executions(t, counter, held.OpID))
}

func TestHoldIsIdempotentAcrossRetriesWindowAndRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := app.Config{DataDir: dir, Streams: streams.Config{Duplicates: 200 * time.Millisecond}}
	a, counter := holdsApp(t, cfg)
	req := events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"cmd":"deploy"}`)}

	// The response is lost: the request is published with no one to
	// answer. The client's retry finds the same hold.
	js, err := jetstream.New(connectAs(t, a, "agent"))
	require.NoError(t, err)
	_, err = js.PublishMsg(ctxT(t), requestMsg(t, req), jetstream.WithMsgID(req.FingerprintHex()))
	require.NoError(t, err)
	opID := events.OpID(req.Fingerprint())
	waitHeldInProjection(t, a, opID)

	c := agentClient(t, a)
	first := submitHeld(t, c, counter, req)
	assert.Equal(t, opID, first.OpID)

	time.Sleep(400 * time.Millisecond) // the dedupe window passes: the point of the test
	reqs, err := a.JetStream.Stream(ctxT(t), streams.Requests)
	require.NoError(t, err)
	stored := reqs.CachedInfo().State.LastSeq
	again := submitHeld(t, c, counter, req)
	reqs, err = a.JetStream.Stream(ctxT(t), streams.Requests)
	require.NoError(t, err)
	assert.Equal(t, stored+1, reqs.CachedInfo().State.LastSeq, "the retry was stored, not deduplicated, and still found the hold")
	// The retry's copy of the args is erased once answered; the hold's own
	// request stays for the approver and the run.
	require.Eventually(t, func() bool {
		_, err := reqs.GetMsg(ctxT(t), stored+1)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}, 5*time.Second, 10*time.Millisecond)
	held, err := a.Store.Op(opID)
	require.NoError(t, err)
	heldReq, err := oplog.HeldRequest(ctxT(t), a.Conn, a.JetStream, opID)
	require.NoError(t, err, "the held op's request is kept, in AIRLOCK_HELD")
	assert.Equal(t, held.ArgsDigest, events.ArgsDigest(heldReq.Args))
	assert.Equal(t, first.HoldID, again.HoldID)
	assert.Equal(t, first.HoldExpiresAt, again.HoldExpiresAt, "the same hold, not a new one")

	// A restart keeps the hold pending and the retry still finds it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Shutdown(ctx))
	cfg.Executors = nil
	cfg.Auth, cfg.Policy = true, confirmSpec()
	cfg.Executors = append(cfg.Executors, counter)
	a = apptest.StartApp(t, cfg)
	c = agentClient(t, a)
	third := submitHeld(t, c, counter, req)
	assert.Equal(t, first.HoldID, third.HoldID)

	ap := approverAs(t, a, "approver")
	pending, err := ap.ListHolds(ctxT(t), "")
	require.NoError(t, err)
	require.Len(t, pending, 1, "one hold for every retry")
	_, err = ap.Grant(ctxT(t), first.HoldID, first.ArgsDigest, "ship it")
	require.NoError(t, err)
	got := waitTerminal(t, a, opID)
	assert.Equal(t, events.StateCompleted, got.State)
	assert.Equal(t, 1, executions(t, counter, opID))
	assert.Equal(t, []events.Type{events.TypeHeld, events.TypeGranted, events.TypeDecided, events.TypeStarted, events.TypeCompleted},
		testenv.OpEvents(t, a.JetStream, "review", opID))
}

func TestDenyIsTerminalAndLaterGrantRefused(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"rm":"-rf"}`)})
	waitHeldInProjection(t, a, held.OpID)
	ap := approverAs(t, a, "approver")
	r, err := ap.Deny(ctxT(t), held.HoldID, held.ArgsDigest, "no")
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, r.State)
	got := waitTerminal(t, a, held.OpID)
	assert.Equal(t, events.StateDenied, got.State)
	assert.Equal(t, events.CodeApprovalDenied, got.ErrorCode)
	assert.Equal(t, "approver", got.Approver)

	_, err = ap.Grant(ctxT(t), held.HoldID, held.ArgsDigest, "actually yes")
	assert.Equal(t, events.CodeHoldResolved, codeOf(err))
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, 0, executions(t, counter, held.OpID))
}

func TestConcurrentResolutions(t *testing.T) {
	dir := t.TempDir()
	_, err := authority.Add(dir, "approver2", authority.RoleApprover)
	require.NoError(t, err)
	a, counter := holdsApp(t, app.Config{DataDir: dir})
	c := agentClient(t, a)
	one, two := approverAs(t, a, "approver"), approverAs(t, a, "approver2")

	t.Run("grant and deny race", func(t *testing.T) {
		for i := range 5 {
			held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"race":%d}`, i))})
			waitHeldInProjection(t, a, held.OpID)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			wg.Add(2)
			go func() { defer wg.Done(); _, errs[0] = one.Grant(ctxT(t), held.HoldID, held.ArgsDigest, "yes") }()
			go func() { defer wg.Done(); _, errs[1] = two.Deny(ctxT(t), held.HoldID, held.ArgsDigest, "no") }()
			wg.Wait()
			won := 0
			for _, err := range errs {
				if err == nil {
					won++
				} else {
					assert.Equal(t, events.CodeHoldResolved, codeOf(err), err)
				}
			}
			assert.Equal(t, 1, won, "exactly one resolution wins")
			got := waitTerminal(t, a, held.OpID)
			if errs[0] == nil {
				assert.Equal(t, events.StateCompleted, got.State)
				assert.Equal(t, 1, executions(t, counter, held.OpID))
			} else {
				assert.Equal(t, events.StateDenied, got.State)
				assert.Equal(t, 0, executions(t, counter, held.OpID))
			}
		}
	})

	t.Run("ten grants", func(t *testing.T) {
		held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"ten":true}`)})
		waitHeldInProjection(t, a, held.OpID)
		var wg sync.WaitGroup
		var fresh, again, refused atomic.Int32
		for i := range 10 {
			ap := one
			if i%2 == 1 {
				ap = two
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := ap.Grant(ctxT(t), held.HoldID, held.ArgsDigest, "yes")
				switch {
				case err == nil && !r.Existing:
					fresh.Add(1)
				case err == nil:
					again.Add(1)
				case codeOf(err) == events.CodeHoldResolved:
					refused.Add(1)
				default:
					t.Errorf("grant: %v", err)
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, int32(1), fresh.Load(), "one grant is appended")
		assert.Equal(t, int32(9), again.Load()+refused.Load())
		got := waitTerminal(t, a, held.OpID)
		assert.Equal(t, events.StateCompleted, got.State)
		assert.Equal(t, 1, executions(t, counter, held.OpID))
		types := testenv.OpEvents(t, a.JetStream, "review", held.OpID)
		assert.Equal(t, []events.Type{events.TypeHeld, events.TypeGranted, events.TypeDecided, events.TypeStarted, events.TypeCompleted}, types)
	})
}

func TestDigestMismatchAndExpiry(t *testing.T) {
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	spec := confirmSpec()
	spec.HoldTTL = "1m"
	a, counter := holdsApp(t, app.Config{Policy: spec, Clock: clock, HoldExpiryInterval: time.Hour})
	c := agentClient(t, a)
	ap := approverAs(t, a, "approver")

	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"amount":10}`)})
	waitHeldInProjection(t, a, held.OpID)
	other := events.ArgsDigest([]byte(`{"amount":10000}`))
	r, err := ap.Grant(ctxT(t), held.HoldID, other, "ok")
	assert.Equal(t, events.CodeGrantDigestMismatch, codeOf(err))
	assert.Equal(t, events.StateHeld, r.State, "the hold stays pending")
	assert.Equal(t, []events.Type{events.TypeHeld}, testenv.OpEvents(t, a.JetStream, "review", held.OpID))

	// Past the expiry, a grant is refused and the hold is marked expired
	// on the spot, before any sweep.
	offset.Store(int64(2 * time.Minute))
	_, err = ap.Grant(ctxT(t), held.HoldID, held.ArgsDigest, "ok")
	assert.Equal(t, events.CodeHoldExpired, codeOf(err))
	got := waitTerminal(t, a, held.OpID)
	assert.Equal(t, events.StateExpired, got.State)
	assert.Equal(t, events.CodeHoldExpired, got.ErrorCode)
	assert.Equal(t, 0, executions(t, counter, held.OpID))

	// A retry of the expired request reports it expired, fail closed.
	out, err := c.Submit(ctxT(t), events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"amount":10}`)})
	require.NoError(t, err)
	assert.Equal(t, events.StateExpired, out.State)
}

func TestHoldExpiresWithoutAnyoneActing(t *testing.T) {
	spec := confirmSpec()
	spec.HoldTTL = "1s"
	a, counter := holdsApp(t, app.Config{Policy: spec, HoldExpiryInterval: 50 * time.Millisecond})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"late":true}`)})
	got := waitTerminal(t, a, held.OpID)
	assert.Equal(t, events.StateExpired, got.State)
	_, err := approverAs(t, a, "approver").Grant(ctxT(t), held.HoldID, held.ArgsDigest, "too late")
	assert.Equal(t, events.CodeHoldExpired, codeOf(err))
	assert.Equal(t, []events.Type{events.TypeHeld, events.TypeExpired}, testenv.OpEvents(t, a.JetStream, "review", held.OpID))
}

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

func indexOf(t *testing.T, a *app.App, name string) int {
	t.Helper()
	for i, p := range a.Authority.Principals() {
		if p.Name == name {
			return i
		}
	}
	t.Fatalf("no principal %s", name)
	return -1
}

func TestAgentCannotResolveAndApproverIsTheCredential(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"self":"grant"}`)})
	waitHeldInProjection(t, a, held.OpID)

	violations := make(chan error, 4)
	agentNC := connectAs(t, a, "agent", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	body, err := json.Marshal(events.Resolution{HoldID: held.HoldID, ArgsDigest: held.ArgsDigest, Decision: events.DecisionGrant, Reason: "I approve myself"})
	require.NoError(t, err)
	for _, name := range []string{"approver", "agent"} {
		require.NoError(t, agentNC.Publish(events.ResolveSubject("review", name), body))
		select {
		case err := <-violations:
			assert.ErrorIs(t, err, nats.ErrPermissionViolation)
		case <-time.After(5 * time.Second):
			t.Fatalf("no permissions violation for a grant published by the agent as %s", name)
		}
	}
	// An approver cannot resolve under another approver's name either.
	apNC := connectAs(t, a, "approver", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	require.NoError(t, apNC.Publish(events.ResolveSubject("review", "operator"), body))
	select {
	case err := <-violations:
		assert.ErrorIs(t, err, nats.ErrPermissionViolation)
	case <-time.After(5 * time.Second):
		t.Fatal("no permissions violation for an approver publishing as another principal")
	}
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, []events.Type{events.TypeHeld}, testenv.OpEvents(t, a.JetStream, "review", held.OpID), "the hold stays pending")

	// The approver's grant records the credential's identity.
	_, err = approverAs(t, a, "approver").Grant(ctxT(t), held.HoldID, held.ArgsDigest, "ok")
	require.NoError(t, err)
	waitTerminal(t, a, held.OpID)
	st, err := a.JetStream.Stream(ctxT(t), streams.Ops)
	require.NoError(t, err)
	ev, err := oplog.LastOf(ctxT(t), st, oplog.Op{Workspace: "review", ID: held.OpID, Tool: "count"}, events.TypeGranted)
	require.NoError(t, err)
	gr := ev.Data.(*events.Granted)
	p, ok := a.Authority.Lookup("approver")
	require.True(t, ok)
	assert.Equal(t, "approver", gr.Approver)
	assert.Equal(t, p.PublicKey, gr.ApproverKey)
}

func TestRulesAllowDenyHold(t *testing.T) {
	spec := policy.Spec{
		Workspaces: map[string]policy.WorkspaceSpec{"review": {Mode: "confirm"}},
		Rules: []policy.RuleSpec{
			{Name: "no-prod", When: `has(args.env) && args.env == "prod"`, Action: "deny", Reason: "never in prod"},
			{Name: "hold-big", When: `has(args.n) && args.n > 100`, Action: "hold", Reason: "big batch"},
			{Name: "small-ok", When: `has(args.n) && args.n <= 3`, Action: "allow", Reason: "small batches run"},
		},
	}
	a, counter := holdsApp(t, app.Config{Policy: spec})
	c := agentClient(t, a)
	cases := []struct {
		ws, args string
		state    events.State
		code     events.Code
		rule     string
	}{
		{"dev", `{"env":"prod"}`, events.StateDenied, events.CodePolicyDenied, "no-prod"},
		{"dev", `{"n":500}`, events.StateHeld, events.CodeApprovalRequired, "hold-big"},
		{"dev", `{"n":50}`, events.StateCompleted, "", ""},
		{"review", `{"n":2}`, events.StateCompleted, "", "small-ok"}, // allow beats confirm
		{"review", `{"n":50}`, events.StateHeld, events.CodeApprovalRequired, ""},
	}
	for _, tc := range cases {
		t.Run(tc.ws+tc.args, func(t *testing.T) {
			out, err := c.Submit(ctxT(t), events.Request{Workspace: tc.ws, Agent: "agent", Tool: "count", Args: json.RawMessage(tc.args)})
			require.NoError(t, err)
			assert.Equal(t, tc.state, out.State)
			assert.Equal(t, tc.code, out.Code)
			want := 0
			if tc.state == events.StateCompleted {
				want = 1
			}
			assert.Equal(t, want, executions(t, counter, out.OpID))
			got := waitOp(t, a, out.OpID)
			assert.Equal(t, tc.rule, got.Rule)
			assert.Equal(t, a.PolicyHash(), got.PolicyHash)
		})
	}
}

// waitOp waits until the projection holds the op.
func waitOp(t *testing.T, a *app.App, id string) *events.Op {
	t.Helper()
	var op *events.Op
	require.Eventually(t, func() bool {
		o, err := a.Store.Op(id)
		op = o
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	return op
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
	assert.Equal(t, 1, executions(t, counter, held.OpID))
	assert.Equal(t, []events.Type{events.TypeHeld, events.TypeGranted, events.TypeDecided, events.TypeStarted, events.TypeCompleted},
		testenv.OpEvents(t, n.JetStream, "review", held.OpID))
}

// The gate that appends a grant resumes the op at once, by push: with
// the resume consumer paused, the op still runs, once; the consumer's
// delivery afterwards finds it resumed.
func TestGrantResumesWithoutTheResumeConsumer(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
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
	cons, err := a.JetStream.Consumer(ctx, streams.Ops, streams.ResumeConsumer)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, 10*time.Second, 10*time.Millisecond, "the delivery is acknowledged")
	assert.Equal(t, 1, executions(t, counter, held.OpID))
	assert.Equal(t, []events.Type{events.TypeHeld, events.TypeGranted, events.TypeDecided, events.TypeStarted, events.TypeCompleted},
		testenv.OpEvents(t, a.JetStream, "review", held.OpID))
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

// A gate resolves a hold it placed without reading the op back, on the
// sequence of the held event it kept: when another process denied the
// hold behind its back, that compare-and-swap loses, and the grant is
// answered from the op as it is: resolved, refused, nothing run.
func TestGrantOfAHoldDeniedElsewhereIsRefused(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"denied":"elsewhere"}`)})
	waitHeldInProjection(t, a, held.OpID)
	ctx := ctxT(t)
	st, err := a.JetStream.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	last, err := oplog.Last(ctx, st, "review", held.OpID)
	require.NoError(t, err)
	require.Equal(t, events.TypeHeld, last.Type)
	_, err = testenv.Writer(t, a.JetStream).Append(ctx, st, oplog.Op{Workspace: "review", ID: held.OpID, Tool: "count"}, last.Seq, events.TypeDenied, "airlock/gate",
		&events.Denied{OpHeader: events.OpHeader{OpID: held.OpID, Workspace: "review"}, HoldID: held.HoldID, Code: events.CodeApprovalDenied, Actor: "approver2", Reason: "no"})
	require.NoError(t, err)

	r, err := approverAs(t, a, "approver").Grant(ctx, held.HoldID, held.ArgsDigest, "yes")
	assert.Equal(t, events.CodeHoldResolved, codeOf(err), "%v", err)
	assert.Equal(t, events.StateDenied, r.State)
	got := waitTerminal(t, a, held.OpID)
	assert.Equal(t, events.StateDenied, got.State)
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, 0, executions(t, counter, held.OpID))
	assert.Equal(t, []events.Type{events.TypeHeld, events.TypeDenied}, testenv.OpEvents(t, a.JetStream, "review", held.OpID))
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

// Bad resolutions get their code and change nothing.
func TestBadResolutionsChangeNothing(t *testing.T) {
	a, counter := holdsApp(t, app.Config{})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"bad":"input"}`)})
	waitHeldInProjection(t, a, held.OpID)
	done, err := c.Submit(ctxT(t), events.Request{Workspace: "review", Agent: "agent", Tool: "echo", Args: json.RawMessage(`{"read":1}`)})
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, done.State)

	send := func(nc *nats.Conn, subject, body string) events.Reply {
		t.Helper()
		resp, err := nc.Request(subject, []byte(body), 10*time.Second)
		require.NoError(t, err)
		var r events.Reply
		require.NoError(t, json.Unmarshal(resp.Data, &r))
		return r
	}
	approver := connectAs(t, a, "approver")
	subj := events.ResolveSubject("review", "approver")
	good := func(holdID, digest string) string {
		return fmt.Sprintf(`{"hold_id":%q,"args_digest":%q,"decision":"grant","reason":"ok"}`, holdID, digest)
	}
	cases := []struct {
		name, body string
		code       events.Code
	}{
		{"not JSON", `{"hold_id":`, events.CodeInvalidResolution},
		{"a forged approver field", fmt.Sprintf(`{"hold_id":%q,"args_digest":%q,"decision":"grant","reason":"ok","approver":"ceo"}`, held.HoldID, held.ArgsDigest), events.CodeInvalidResolution},
		{"bad hold id", good("hold_x", held.ArgsDigest), events.CodeInvalidResolution},
		{"bad digest", good(held.HoldID, "md5:abc"), events.CodeInvalidResolution},
		{"bad decision", fmt.Sprintf(`{"hold_id":%q,"args_digest":%q,"decision":"maybe","reason":"ok"}`, held.HoldID, held.ArgsDigest), events.CodeInvalidResolution},
		{"no reason", fmt.Sprintf(`{"hold_id":%q,"args_digest":%q,"decision":"grant","reason":" "}`, held.HoldID, held.ArgsDigest), events.CodeInvalidResolution},
		{"unknown hold", good(events.HoldID("op_0123456789abcdef0123456789abcdef"), held.ArgsDigest), events.CodeHoldNotFound},
		{"an op that was never held", good(events.HoldID(done.OpID), held.ArgsDigest), events.CodeHoldNotFound},
		{"another workspace", good(held.HoldID, held.ArgsDigest), events.CodeHoldNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := subj
			if tc.name == "another workspace" {
				s = events.ResolveSubject("elsewhere", "approver")
			}
			r := send(approver, s, tc.body)
			assert.Equal(t, tc.code, r.Code, r.Message)
		})
	}
	// A principal that is not an approver, even one the server lets
	// publish there (Airlock's own), is refused by the gate.
	r := send(connectAs(t, a, authority.ServiceName), events.ResolveSubject("review", "operator"), good(held.HoldID, held.ArgsDigest))
	assert.Equal(t, events.CodeNotAuthorized, r.Code)

	assert.Equal(t, []events.Type{events.TypeHeld}, testenv.OpEvents(t, a.JetStream, "review", held.OpID), "the hold is untouched")
	_, err = approverAs(t, a, "approver").Grant(ctxT(t), held.HoldID, held.ArgsDigest, "now properly")
	require.NoError(t, err)
	assert.Equal(t, events.StateCompleted, waitTerminal(t, a, held.OpID).State)
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
