package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCrashUnderLoad SIGKILLs airlock serve twice while clients submit ops
// of the counting executor, restarts it on the same data dir each time, and
// checks that every op reaches exactly one terminal event and that every
// completed op was executed exactly once (the executor records each
// execution durably, so the count survives the kills).
func TestCrashUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	dir, ledger := t.TempDir(), t.TempDir()
	addr := freePort(t)
	env := []string{"AIRLOCK_TEST_LEDGER=" + ledger}
	srv := startServer(t, dir, addr, env, "--claim-timeout", "1s")

	nc := srv.connect(t, "agent", nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	c, err := producers.New(nc, producers.WithWait(time.Second), producers.WithPollInterval(200*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()

	const ops = 300
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	outcomes := make([]producers.Outcome, ops)
	var finished atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				req := events.Request{Workspace: "crash", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
				for ctx.Err() == nil {
					out, err := c.Submit(ctx, req) // a retry reuses the fingerprint
					if err == nil && out.Terminal() {
						outcomes[i] = out
						finished.Add(1)
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	go func() {
		defer close(work)
		for i := range ops {
			select {
			case work <- i:
			case <-ctx.Done():
				return
			}
		}
	}()

	for kill, at := range []int64{ops / 4, ops / 2} {
		require.Eventually(t, func() bool { return finished.Load() >= at }, 2*time.Minute, 5*time.Millisecond, "kill %d", kill)
		srv.kill()
		srv = startServer(t, dir, addr, env, "--claim-timeout", "1s")
	}
	wg.Wait()
	require.NoError(t, ctx.Err())

	// Every op ended once; every completed op ran exactly once.
	js, err := jetstream.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(ledger, "DOUBLE"))
	require.True(t, os.IsNotExist(err), "an op executed twice")
	counts := map[events.State]int{}
	for i, out := range outcomes {
		require.True(t, out.Terminal(), "op %d: %+v", i, out)
		counts[out.State]++
		terminals := 0
		for _, typ := range testenv.OpEvents(t, js, "crash", out.OpID) {
			if typ == events.TypeCompleted || typ == events.TypeFailed || typ == events.TypeAmbiguous || typ == events.TypeDenied {
				terminals++
			}
		}
		assert.Equal(t, 1, terminals, "op %d %s terminal events", i, out.OpID)
		_, err := os.Stat(filepath.Join(ledger, out.OpID))
		switch out.State {
		case events.StateCompleted:
			assert.NoError(t, err, "completed op %s has no execution record", out.OpID)
			// The result is kept nowhere: a submitter whose reply was lost
			// to a kill learns its digest from the retry.
			want := fmt.Sprintf(`{"i":%d}`, i)
			assert.Equal(t, events.Digest([]byte(want)), out.ResultDigest)
			if out.Result != nil {
				assert.JSONEq(t, want, string(out.Result))
			}
		case events.StateAmbiguous:
			// Only a record torn by the kill makes the counter ambiguous.
			assert.NoError(t, err)
		default:
			t.Errorf("op %d ended %s %s: %s", i, out.State, out.Code, out.Message)
		}
	}
	t.Logf("outcomes after two SIGKILLs: %v", counts)
	assert.Equal(t, ops, counts[events.StateCompleted]+counts[events.StateAmbiguous])

	// The projection agrees with the stream once it has caught up.
	var listed []*events.Op
	require.Eventually(t, func() bool {
		res, err := c.List(ctx, projectorQuery("completed"))
		listed = nil
		if err == nil {
			listed = res.Ops
		}
		return err == nil && len(res.Ops) == counts[events.StateCompleted]
	}, 30*time.Second, 50*time.Millisecond)
	retried := 0
	for _, op := range listed {
		if op.Attempts > 1 {
			retried++
		}
	}
	t.Logf("ops claimed more than once (recovered after a kill): %d", retried)
}

// TestCrashAfterSideEffect kills airlock serve after an executor's side
// effect and before its result is stored, then restarts it: recovery reads
// the executor's own record and completes the op without running it again.
func TestCrashAfterSideEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	k := startKillable(t, "--claim-timeout", "1s")
	req := events.Request{Workspace: "crash", Agent: "agent", Tool: "count_slow", Args: json.RawMessage(`{"once":true}`)}
	out, err := k.c.Submit(k.ctx, req)
	require.NoError(t, err)
	require.True(t, out.Pending)
	k.killAfterEffect(t, out.OpID)

	out = k.recoveredOnce(t, req)
	// The recovered result is the executor's record of the call; it went to
	// the reply only, so a Submit that missed it has the digest alone.
	assert.Equal(t, events.Digest([]byte(`{"once":true}`)), out.ResultDigest)
	if out.Result != nil {
		assert.JSONEq(t, `{"once":true}`, string(out.Result))
	}
	// The lost attempt started (the gate's process started it, ADR
	// 0025), and its record shows it ran: its own outcome is stored, with
	// no second claim.
	assert.Equal(t, []events.Type{events.TypeStarted, events.TypeCompleted},
		testenv.OpEvents(t, mustJS(t, k.srv.connect(t, authority.ServiceName)), "crash", out.OpID))
}

// killable is an airlock serve, with the counting executors, that a test
// kills and starts again on the same data dir, and an agent's client of
// it that reconnects.
type killable struct {
	srv         *server
	dir, ledger string
	addr        string
	env, args   []string
	c           *producers.Client
	ctx         context.Context
}

func startKillable(t *testing.T, args ...string) *killable {
	t.Helper()
	k := &killable{dir: t.TempDir(), ledger: t.TempDir(), addr: freePort(t), args: args}
	k.env = []string{"AIRLOCK_TEST_LEDGER=" + k.ledger}
	k.srv = startServer(t, k.dir, k.addr, k.env, args...)
	nc := k.srv.connect(t, "agent", nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	c, err := producers.New(nc, producers.WithWait(200*time.Millisecond), producers.WithPollInterval(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	k.c, k.ctx = c, ctx
	return k
}

// killAfterEffect waits for op's side effect, kills serve before its
// result is stored, and starts it again.
func (k *killable) killAfterEffect(t *testing.T, op string) {
	t.Helper()
	// The record is whole (the executor writes it, then syncs it): a kill
	// between its creation and its write would leave it torn, which is
	// recovered as ambiguous, not what these tests are about.
	record := filepath.Join(k.ledger, op)
	require.Eventually(t, func() bool { b, err := os.ReadFile(record); return err == nil && json.Valid(b) }, 30*time.Second, 10*time.Millisecond)
	k.srv.kill() // the side effect is done; its result is not stored
	k.srv = startServer(t, k.dir, k.addr, k.env, k.args...)
}

// recoveredOnce submits req again until its op ends, and checks that it
// completed, through recovery, having run once.
func (k *killable) recoveredOnce(t *testing.T, req events.Request) producers.Outcome {
	t.Helper()
	var out producers.Outcome
	require.Eventually(t, func() bool {
		var err error
		out, err = k.c.Submit(k.ctx, req)
		return err == nil && out.Terminal()
	}, time.Minute, 50*time.Millisecond)
	assert.Equal(t, events.StateCompleted, out.State, "%+v", out)
	_, err := os.Stat(filepath.Join(k.ledger, "DOUBLE"))
	assert.True(t, os.IsNotExist(err), "executed twice")
	recovered, err := os.ReadFile(filepath.Join(k.ledger, "RECOVERED"))
	require.NoError(t, err)
	assert.Equal(t, out.OpID+"\n", string(recovered))
	return out
}

func mustJS(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// TestCrashAfterSideEffectOfAGrantedOp kills airlock serve after the side
// effect of a held op that its gate started itself when the grant's
// delivery came (ADR 0029), and before the result is stored; then it
// restarts it. The grant, delivered again, goes to recovery, which reads
// the executor's own record and completes the op without running it
// again.
func TestCrashAfterSideEffectOfAGrantedOp(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("tools: {count_slow: write}\ndefault_mode: auto\nworkspaces:\n  review: {mode: confirm}\n"), 0o600))
	k := startKillable(t, "--claim-timeout", "1s", "--policy", policy)
	req := events.Request{Workspace: "review", Agent: "agent", Tool: "count_slow", Args: json.RawMessage(`{"held":true}`)}
	out, err := k.c.Submit(k.ctx, req)
	require.NoError(t, err)
	require.True(t, out.Held(), "held: %+v", out)
	stdout, stderr, code := k.srv.run(t, "holds", "grant", out.HoldID, "--reason", "ok")
	require.Equal(t, 0, code, stdout+stderr)
	k.killAfterEffect(t, out.OpID)

	out = k.recoveredOnce(t, req)
	// The lost attempt was started when the grant was delivered, and its
	// record shows it ran: its own outcome is stored, with no second claim.
	assert.Equal(t, []events.Type{events.TypeHeld, events.TypeGranted, events.TypeStarted, events.TypeCompleted},
		testenv.OpEvents(t, mustJS(t, k.srv.connect(t, authority.ServiceName)), "review", out.OpID))
}
