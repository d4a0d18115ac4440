package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Log lines of the gate that the test below reads (consumers/gate).
const (
	logPushLost = "hold resumed by its grant's delivery first"
	logLeftToOp = "a started op's work item left to a process that serves its tool"
)

// opInLog is the op a log line names.
var opInLog = regexp.MustCompile(`"op":"([^"]+)"`)

// logsOp reports whether a log line of process i that contains s names
// op.
func (d *deployment) logsOp(i int, s, op string) bool {
	p := d.proc(i)
	if p == nil {
		return false
	}
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if m := opInLog.FindStringSubmatch(line); m != nil && m[1] == op && strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// until polls cond, which may fail the test, in the test's goroutine
// until it holds, within d.
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A deployment whose processes serve different workspaces (ADR 0029,
// "a push that lost"). The gate that appends the grant of an op its own
// process does not run pushes the op's resume at once; the grant's
// delivery to a process that runs the op may start it first, and the
// push then loses its compare-and-swap. That lost push resumed nothing:
// when the process that started the op dies, the grant, delivered again
// to the pushing gate, is left to a process that serves the tool, not
// acked as resumed, and the op ends once that process is back, having
// run once.
//
// The pusher pauses before each push (failpoint before-push), so that
// the grant's delivery, when it goes to the runner, starts the op first.
func TestClusterLostPushLeavesTheGrantToTheOp(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const pusher, runner = 0, 1
	d := prepareDeployment(t, 2, "--claim-timeout", "2s", "--log-level", "debug")
	d.extra = map[int][]string{
		pusher: {"--executor-group", "pushers", "--workspaces", clusterWS},
		runner: {"--executor-group", "runners", "--workspaces", clusterHeldWS},
	}
	d.start(runner)
	d.startWith(pusher, []string{failpoint.EnvVar + "=" + failpoint.BeforePush + ":exec=pause-each:2s"})
	c := d.agent(t, producers.WithWait(time.Second))
	ap := d.approver(t)
	js := d.cluster.jetStream(t, d.set)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runnerInstance := instanceOf(t, d.dirs[runner])

	// Held ops granted one after the other, in rounds of 48 until a push
	// lost (one round, nearly always). The resolutions' queue group gives
	// each grant to either gate, and the grant's delivery goes to either;
	// when the pusher appended it and the runner took it, the runner
	// starts the op while the push waits, and the push loses.
	const perRound, rounds = 48, 3
	var reqs []events.Request
	var ops, lost []string
	for round := 0; round < rounds && len(lost) == 0; round++ {
		from := len(ops)
		for i := from; i < from+perRound; i++ {
			args, _ := json.Marshal(map[string]any{
				"argv":       []string{"/bin/sh", "-c", fmt.Sprintf("echo %d >> %s; sleep 60", i, d.marker())},
				"timeout_ms": 180_000,
			})
			req := events.Request{Workspace: clusterHeldWS, Agent: "agent", Tool: "exec", Args: args}
			var held producers.Outcome
			until(t, 30*time.Second, "the op is held", func() bool {
				var err error
				held, err = c.Submit(ctx, req)
				require.NoError(t, err)
				require.True(t, held.Held() || held.Pending, "held: %+v", held)
				return held.Held()
			})
			reqs, ops = append(reqs, req), append(ops, held.OpID)
			until(t, 30*time.Second, "the grant is recorded", func() bool {
				_, err := ap.Resolve(ctx, clusterHeldWS, events.Resolution{HoldID: held.HoldID, ArgsDigest: held.ArgsDigest, Decision: events.DecisionGrant, Reason: "lost push"})
				// The approver signs the hold as a process's projection has
				// it, which may not have folded it yet.
				require.True(t, err == nil || events.CodeOf(err) == events.CodeHoldNotFound, "%v", err)
				return err == nil
			})
		}
		// Every push of the pusher's gate has ended: each grant it
		// appended was resumed (by the push or by its delivery there), or
		// the push lost, or failed.
		waitFor(t, 30*time.Second, "every push ends", func() bool {
			for _, op := range ops[from:] {
				if d.logsOp(pusher, "hold resolved", op) && !d.logsOp(pusher, "hold resumed", op) && !d.logsOp(pusher, "hold not resumed at once", op) {
					return false
				}
			}
			return true
		})
		for _, op := range ops[from:] {
			if !d.logsOp(pusher, logPushLost, op) {
				continue
			}
			// Lost to the runner's start through the grant's delivery, not
			// to the pusher's own delivery, which decided the op.
			evs := opEvents(t, js, op)
			if !slices.Equal(typesOf(evs), []string{"held", "granted", "started"}) {
				continue
			}
			if claim := evs[2].Data.(*events.Started).Claim; claim != nil && claim.Consumer == streams.ResumeConsumer && claim.Instance == runnerInstance {
				lost = append(lost, op)
			}
		}
	}
	n := len(ops)
	t.Logf("%d held ops, %d pushes lost to the runner's start", n, len(lost))
	require.NotEmpty(t, lost, "no push lost to the runner's start: the race under test did not happen")
	waitFor(t, 30*time.Second, "the ops of the lost pushes run", func() bool {
		counts := d.markerCounts(t)
		for _, op := range lost {
			if counts[slices.Index(ops, op)] != 1 {
				return false
			}
		}
		return true
	})

	// The runner dies while every op runs. Each grant it started an op
	// through is delivered again, to the pusher's gate only, which leaves
	// it to a process that serves the tool: the lost pushes' too.
	d.kill(runner)
	waitFor(t, time.Minute, "the pusher leaves the lost pushes' grants to the runner", func() bool {
		for _, op := range lost {
			if !d.logsOp(pusher, logLeftToOp, op) {
				return false
			}
		}
		return true
	})

	// Back, the runner settles each op it started from its ledger: none
	// is left executing. No op ran twice. (The ops decided for the
	// runners' consumer, four of these slow calls at a time, are not
	// waited for.)
	d.start(runner)
	for _, op := range lost {
		out := submitUntilEnd(t, c, reqs[slices.Index(ops, op)], time.Minute)
		assert.Contains(t, []events.State{events.StateCompleted, events.StateAmbiguous}, out.State, "%+v", out)
	}
	for id, runs := range d.markerCounts(t) {
		assert.Equal(t, 1, runs, "op %d ran %d times", id, runs)
	}
	d.checkAlive()
}
