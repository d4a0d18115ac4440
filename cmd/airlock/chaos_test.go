package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
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
	q, err := producers.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	defer q.Close()
	// Each op's events: those the stream holds, then, once every op has
	// been read, those that left it for the archive meanwhile or before
	// (ADR 0026; the last start purges ended ops while this runs).
	evs := make([]map[uint64]opEvent, len(cases))
	for i, c := range cases {
		evs[i] = streamEvents(t, js, "crash", c.opID(t))
	}
	byOp := map[string]int{}
	for i, c := range cases {
		byOp[c.opID(t)] = i
	}
	fromArchive := 0 // events that had left the stream when it was read
	for _, m := range archived(t, js) {
		if ws, op, _, _, ok := events.OpSubjectParts(m.Subject); ok && ws == "crash" {
			if i, ok := byOp[op]; ok {
				if _, read := evs[i][m.Seq]; !read {
					fromArchive++
				}
				evs[i][m.Seq] = opEventOf(m.Header)
			}
		}
	}
	ambiguous, stored, doubles := 0, 0, 0
	for i, c := range cases {
		opID := c.opID(t)
		if len(evs[i]) == 0 {
			// Never stored (the publish died with the server): nothing ran.
			assert.LessOrEqual(t, c.effects(t), 0, "%s %s ran without an op", c.tool, opID)
			continue
		}
		stored++
		op := waitOpWith(t, q, opID, func() string {
			return fmt.Sprintf("events %v; serve: %s", evs[i], srv.stderr.String())
		})
		assert.Equal(t, 1, terminalsOf(evs[i]), "%s %s: one terminal event", c.tool, opID)
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
	fmt.Fprintf(os.Stderr, "chaos: %d ops (%d stored; %d events read from the archive), %d double executions, %d ambiguous, %d kills\n", len(cases), stored, fromArchive, doubles, ambiguous, kills)
	require.False(t, t.Failed(), "chaos seed %d", seed)
}

// opEvent is one event of an op: its type, and whether it states again,
// for a retry, the outcome of an op that had left the stream (no new
// outcome).
type opEvent struct {
	typ       events.Type
	restating bool
}

func opEventOf(h nats.Header) opEvent {
	return opEvent{typ: events.Type(h.Get(events.HeaderPrefix + "type")), restating: h.Get(events.HeaderRestates) != ""}
}

// streamEvents reads the events of op in workspace ws that the ops
// stream holds, by sequence.
func streamEvents(t *testing.T, js jetstream.JetStream, ws, op string) map[uint64]opEvent {
	t.Helper()
	out := map[uint64]opEvent{}
	for _, m := range testenv.OpMessages(t, js, ws, op) {
		md, err := m.Metadata()
		require.NoError(t, err)
		out[md.Sequence.Stream] = opEventOf(m.Headers())
	}
	return out
}

// terminalsOf counts the outcomes among an op's events.
func terminalsOf(evs map[uint64]opEvent) int {
	n := 0
	for _, e := range evs {
		switch e.typ {
		case events.TypeCompleted, events.TypeFailed, events.TypeAmbiguous, events.TypeDenied, events.TypeExpired:
			if !e.restating {
				n++
			}
		}
	}
	return n
}
