package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/testexec"
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
	assert.Equal(t, grantedRun,
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
	ranOnceAfterGrant(t, counter, a.JetStream, opID)
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
		assert.Equal(t, grantedRun, types)
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

// grantedRun is the events of a held op in workspace review that was
// granted and ran: the gate that took the grant's delivery started it
// (ADR 0029).
var grantedRun = []events.Type{events.TypeHeld, events.TypeGranted, events.TypeStarted, events.TypeCompleted}

// grantedDecidedRun is the same when the op was decided on its resume
// and then claimed by a runner.
var grantedDecidedRun = []events.Type{events.TypeHeld, events.TypeGranted, events.TypeDecided, events.TypeStarted, events.TypeCompleted}

// ranOnceAfterGrant asserts that op ran once, through its hold, its
// grant and nothing else.
func ranOnceAfterGrant(t *testing.T, counter *testexec.Counter, js jetstream.JetStream, op string) {
	t.Helper()
	ranOnceAs(t, counter, js, op, grantedRun)
}

// ranOnceAs asserts that op ran once, with the events want.
func ranOnceAs(t *testing.T, counter *testexec.Counter, js jetstream.JetStream, op string, want []events.Type) {
	t.Helper()
	assert.Equal(t, 1, executions(t, counter, op))
	assert.Equal(t, want, testenv.OpEvents(t, js, "review", op))
}
