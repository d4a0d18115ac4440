package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Chaos bounds: this many SIGKILLs, unless the time runs out first.
const (
	chaosKills  = 200
	chaosBudget = 4 * time.Minute
)

// TestChaosMixedLoad kills serve at random moments under a mixed load of
// exec, apply_patch and echo ops, restarting it on the same data dir each
// time, then checks every op: one terminal state, no side effect twice,
// and what is ambiguous said so.
func TestChaosMixedLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test")
	}
	dir, root, marks, addr := t.TempDir(), t.TempDir(), t.TempDir(), freePort(t)
	pol := toolsPolicy(t, root)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	seed := rng.Uint64()
	t.Logf("chaos seed %d", seed)
	rng = rand.New(rand.NewPCG(seed, 7))

	var cases []toolCase
	next := func() toolCase {
		i := len(cases)
		var c toolCase
		switch i % 3 {
		case 0:
			c = execCase(t, filepath.Join(marks, fmt.Sprintf("m%d", i)), "")
		case 1:
			c = patchCase(t, root, fmt.Sprintf("f%d", i))
		default:
			c = toolCase{tool: "echo", args: fmt.Sprintf(`{"i":%d}`, i), effects: func(*testing.T) int { return 0 }}
		}
		cases = append(cases, c)
		return c
	}

	start := time.Now()
	kills := 0
	for kills < chaosKills && time.Since(start) < chaosBudget {
		srv := startServer(t, dir, addr, nil, "--policy", pol, "--claim-timeout", "1s", "--archive-keep", "64")
		nc := srv.connect(t, "agent", nats.MaxReconnects(0))
		c, err := producers.New(nc, producers.WithWait(2*time.Second), producers.WithPublishTries(1))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 3 {
			tc := next()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = c.Submit(ctx, events.Request{Workspace: "crash", Agent: "agent", Tool: tc.tool, Args: json.RawMessage(tc.args)})
			}()
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		srv.kill()
		kills++
		cancel()
		wg.Wait()
		_ = c.Close()
		nc.Close()
	}

	// The last start settles everything: recovery of lost claims, retries.
	srv := startServer(t, dir, addr, nil, "--policy", pol, "--claim-timeout", "1s", "--archive-keep", "64")
	js, err := jetstream.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gate, err := js.Consumer(ctx, streams.Requests, streams.GateConsumer)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := gate.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, 30*time.Second, 50*time.Millisecond, "the gate decided every stored request")
	ops, err := js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	q, err := producers.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	defer q.Close()
	ambiguous, stored, doubles := 0, 0, 0
	for _, c := range cases {
		opID := c.opID(t)
		if _, err := oplog.Last(ctx, ops, "crash", opID); errors.Is(err, oplog.ErrEmpty) {
			// Never stored (the publish died with the server): nothing ran.
			assert.LessOrEqual(t, c.effects(t), 0, "%s %s ran without an op", c.tool, opID)
			continue
		}
		stored++
		op := waitOpWith(t, q, opID, func() string {
			return fmt.Sprintf("events %v; serve: %s", testenv.OpEvents(t, js, "crash", opID), srv.stderr.String())
		})
		assert.Equal(t, 1, terminalsIn(t, js, opID), "%s %s: one terminal event", c.tool, opID)
		effects := c.effects(t)
		switch op.State {
		case events.StateCompleted:
			if c.tool != "echo" {
				assert.Equal(t, 1, effects, "%s %s completed: its effect happened once", c.tool, opID)
			}
		case events.StateAmbiguous:
			ambiguous++
			assert.Equal(t, events.CodeAmbiguous, op.ErrorCode)
			assert.NotEmpty(t, op.Error, "an ambiguous op says what is known")
			assert.LessOrEqual(t, effects, 1, "an ambiguous op ran at most once")
		default:
			assert.LessOrEqual(t, effects, 0, "%s %s is %s (%s): no effect", c.tool, opID, op.State, op.Error)
		}
		if c.tool == "exec" && effects > 1 {
			doubles++
			t.Errorf("exec %s ran %d times", opID, effects)
		}
	}
	t.Logf("%d kills in %s", kills, time.Since(start).Round(time.Second))
	fmt.Fprintf(os.Stderr, "chaos: %d ops (%d stored), %d double executions, %d ambiguous, %d kills\n", len(cases), stored, doubles, ambiguous, kills)
	require.False(t, t.Failed(), "chaos seed %d", seed)
}
