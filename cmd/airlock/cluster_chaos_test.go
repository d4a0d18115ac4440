package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chaosPlan is one run of the cluster chaos test. make test runs the
// default; make soak sets it from AIRLOCK_SOAK_* (see docs/operations.md).
type chaosPlan struct {
	// load is how long new ops are submitted, at least.
	load time.Duration
	// minAirlockKills and minNodeKills keep the load and the kills going
	// past load until both are reached, within maxLoad.
	minAirlockKills, minNodeKills int
	maxLoad                       time.Duration
	// workers submit ops at once, each retrying its op until it ends.
	workers int
	seed    uint64
}

func chaosPlanFromEnv(t *testing.T) chaosPlan {
	p := chaosPlan{load: 100 * time.Second, minAirlockKills: 6, minNodeKills: 3, maxLoad: 150 * time.Second, workers: 12,
		seed: uint64(time.Now().UnixNano())}
	num := func(name string, into *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			require.NoError(t, err, name)
			*into = n
		}
	}
	dur := func(name string, into *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			require.NoError(t, err, name)
			*into = d
		}
	}
	dur("AIRLOCK_SOAK_LOAD", &p.load)
	dur("AIRLOCK_SOAK_MAX_LOAD", &p.maxLoad)
	num("AIRLOCK_SOAK_AIRLOCK_KILLS", &p.minAirlockKills)
	num("AIRLOCK_SOAK_NODE_KILLS", &p.minNodeKills)
	num("AIRLOCK_SOAK_WORKERS", &p.workers)
	if v := os.Getenv("AIRLOCK_SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
		p.seed = s
	}
	return p
}

// TestClusterChaos is the exactly-once proof on a cluster: three
// nats-server processes from deploy/cluster and three `airlock serve
// --replicas 3` processes, exec ops that each append their id to a marker
// file, every request retried identically until it ends, while Airlock
// processes and NATS nodes (the ops stream's leader among them) are
// SIGKILLed at random and restarted. One op in four is held, and granted
// by an approver when its submit says so; its grant's delivery is then
// the work item of the process that starts it (ADR 0029). No id may be in the marker twice, no
// completed op may lack its line, every op must end, no ledger may be
// left, and every data dir must hold the same sound audit log.
func TestClusterChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster chaos test")
	}
	plan := chaosPlanFromEnv(t)
	t.Logf("cluster chaos seed %d (AIRLOCK_SOAK_SEED to repeat)", plan.seed)
	rng := rand.New(rand.NewPCG(plan.seed, 14))
	d := newDeployment(t, 3, "--claim-timeout", "3s", "--log-level", "info", "--archive-keep", "256")
	js := d.cluster.jetStream(t, d.set)
	c := d.agent(t, producers.WithWait(3*time.Second), producers.WithPollInterval(250*time.Millisecond))
	ap := d.approver(t)

	// The workers retry until their op ends, or until two minutes after
	// the load stops: an op still open then is lost.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		outcomes = map[int]producers.Outcome{}
		lost     []int
		next     atomic.Int64
		stopLoad atomic.Bool
		grants   atomic.Int64 // grants the approver sent, tries included
	)
	var workers sync.WaitGroup
	for range plan.workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for !stopLoad.Load() {
				id := int(next.Add(1))
				req := chaosRequest(d, id)
				var out producers.Outcome
				for {
					var err error
					out, err = c.Submit(ctx, req) // a retry is the same request
					if err == nil && out.Terminal() {
						break
					}
					if err == nil && out.Held() {
						// Granted until the hold says it was: a grant
						// whose answer was lost is sent again, and told
						// HOLD_RESOLVED.
						grants.Add(1)
						_, _ = ap.Resolve(ctx, req.Workspace, events.Resolution{HoldID: out.HoldID, ArgsDigest: out.ArgsDigest, Decision: events.DecisionGrant, Reason: "chaos"})
					}
					if ctx.Err() != nil {
						mu.Lock()
						lost = append(lost, id)
						mu.Unlock()
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				mu.Lock()
				outcomes[id] = out
				mu.Unlock()
			}
		}()
	}

	// The faults: one NATS node down at a time (a majority keeps the
	// streams writable), one Airlock process down at a time.
	var faults sync.WaitGroup
	var nodeDown, airlockDown atomic.Bool
	var airlockKills, nodeKills, leaderKills atomic.Int64
	start := time.Now()
	lastReport := start
	for {
		elapsed := time.Since(start)
		if time.Since(lastReport) >= 30*time.Second {
			lastReport = time.Now()
			t.Logf("chaos at %s: %d ops begun, kills %d airlock, %d nats", elapsed.Round(time.Second), next.Load(), airlockKills.Load(), nodeKills.Load())
		}
		enough := airlockKills.Load() >= int64(plan.minAirlockKills) && nodeKills.Load() >= int64(plan.minNodeKills)
		if elapsed >= plan.maxLoad || (elapsed >= plan.load && enough) {
			break
		}
		time.Sleep(time.Duration(1500+rng.IntN(3500)) * time.Millisecond)
		// Once the node kills are enough, most faults are Airlock kills:
		// a restart takes longer than a node's return, so an even split
		// would leave the Airlock count behind.
		nodeOdds := 2
		if nodeKills.Load() >= int64(plan.minNodeKills) {
			nodeOdds = 4
		}
		if rng.IntN(nodeOdds) == 0 && nodeDown.CompareAndSwap(false, true) {
			victim := d.cluster.nodes[rng.IntN(3)]
			if rng.IntN(2) == 0 {
				if n := d.cluster.node(leader(js, streams.Ops)); n != nil {
					victim = n
					leaderKills.Add(1)
				}
			}
			victim.kill()
			nodeKills.Add(1)
			down := time.Duration(2000+rng.IntN(8000)) * time.Millisecond
			faults.Add(1)
			go func() {
				defer faults.Done()
				time.Sleep(down)
				victim.start(t)
				nodeDown.Store(false)
			}()
			continue
		}
		if airlockDown.CompareAndSwap(false, true) {
			i := rng.IntN(len(d.dirs))
			d.kill(i)
			airlockKills.Add(1)
			down := time.Duration(rng.IntN(3000)) * time.Millisecond
			faults.Add(1)
			go func() {
				defer faults.Done()
				time.Sleep(down)
				d.start(i)
				airlockDown.Store(false)
			}()
		}
	}
	stopLoad.Store(true)
	loadTook := time.Since(start)
	faults.Wait()
	drain := time.AfterFunc(2*time.Minute, cancel)
	workers.Wait()
	drain.Stop()
	for _, id := range lost {
		req := chaosRequest(d, id)
		require.NoError(t, req.Validate())
		_, op := req.Identity()
		var evs []string
		for _, e := range testenv.OpEvents(t, js, req.Workspace, op) {
			evs = append(evs, e.Short())
		}
		t.Logf("lost op %d %s: events %v", id, op, evs)
		for _, line := range d.grep(op) {
			t.Logf("  %s", line)
		}
	}

	// Every op the workers saw end, as the stream and the marker file
	// tell it.
	d.waitCaughtUp(t, js)
	tally := tallyOps(t, js)
	marks := d.markerCounts(t)
	counts := map[events.State]int{}
	doubles, missing := 0, 0
	for id, out := range outcomes {
		counts[out.State]++
		n := marks[id]
		if n > 1 {
			doubles++
			t.Errorf("op %d (%s) ran %d times, ended %s", id, out.OpID, n, out.State)
		}
		switch out.State {
		case events.StateCompleted:
			if n == 0 {
				missing++
				t.Errorf("op %d (%s) completed without its marker line", id, out.OpID)
			}
		case events.StateAmbiguous:
			assert.Equal(t, events.CodeAmbiguous, out.Code, "op %d", id)
		case events.StateFailed:
			// Say why, and what the op's events were, before the check
			// below fails the test.
			var evs []string
			for _, e := range testenv.OpEvents(t, js, chaosRequest(d, id).Workspace, out.OpID) {
				evs = append(evs, e.Short())
			}
			t.Logf("op %d (%s) failed: %s: %s; events %v", id, out.OpID, out.Code, out.Message, evs)
			for _, line := range d.grep(out.OpID) {
				t.Logf("  %s", line)
			}
			assert.Zero(t, n, "op %d (%s) failed but ran", id, out.OpID)
		default:
			var evs []string
			for _, e := range testenv.OpEvents(t, js, chaosRequest(d, id).Workspace, out.OpID) {
				evs = append(evs, e.Short())
			}
			t.Logf("op %d (%s) ended %s: %s: %s; events %v", id, out.OpID, out.State, out.Code, out.Message, evs)
			assert.Zero(t, n, "op %d (%s) ended %s %s but ran", id, out.OpID, out.State, out.Code)
		}
		if tl := tally[out.OpID]; assert.NotNil(t, tl, "op %d has no events", id) {
			assert.Equal(t, 1, tl.terminals, "op %d (%s): one terminal event", id, out.OpID)
		}
	}
	for id := range marks {
		if _, ok := outcomes[id]; !ok && !slices.Contains(lost, id) {
			t.Errorf("marker line of op %d, which nobody submitted", id)
		}
	}

	archivedOps := 0
	for _, tl := range tally {
		if tl.archived > 0 {
			archivedOps++
		}
	}
	held := 0
	for id := range outcomes {
		if chaosRequest(d, id).Workspace == clusterHeldWS {
			held++
		}
	}
	summary := fmt.Sprintf("cluster chaos: %d ops in %s (%d held and granted, %d grants sent), kills: %d airlock, %d nats (%d of the ops stream leader); "+
		"completed %d, ambiguous %d, failed %d, other %d; double executions %d, completed without effect %d, lost %d; "+
		"serve starts that failed %d; ops whose events left the stream for the archive %d; seed %d",
		len(outcomes), loadTook.Round(time.Second), held, grants.Load(), airlockKills.Load(), nodeKills.Load(), leaderKills.Load(),
		counts[events.StateCompleted], counts[events.StateAmbiguous], counts[events.StateFailed],
		len(outcomes)-counts[events.StateCompleted]-counts[events.StateAmbiguous]-counts[events.StateFailed],
		doubles, missing, len(lost), d.startFailures, archivedOps, plan.seed)
	t.Log(summary)
	fmt.Fprintln(os.Stderr, summary)
	// No ledger left, whichever process ended the op.
	var left []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		left = left[:0]
		for _, dir := range d.dirs {
			left = append(left, ledgerLeft(t, dir)...)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	assert.Empty(t, left, "ledger entries left once every op ended")

	// One audit log, sound in every data dir.
	logs := d.verifyAll(t)
	for i, v := range logs[1:] {
		assert.Equal(t, logs[0].Origin, v.Origin, "data dir %d's log origin", i+1)
		assert.Equal(t, logs[0].Size, v.Size, "data dir %d's log size", i+1)
		assert.Equal(t, logs[0].Root, v.Root, "data dir %d's log root", i+1)
		assert.Equal(t, logs[0].CheckpointSize, v.CheckpointSize, "data dir %d's newest checkpoint", i+1)
	}
	// And the same proof of an op from every data dir.
	for id, out := range outcomes {
		if out.State != events.StateCompleted {
			continue
		}
		var proofs []string
		for _, dir := range d.dirs {
			stdout, stderr, code := run(t, "audit", "prove", out.OpID, "--data", dir)
			require.Equal(t, 0, code, "prove op %d from %s: %s", id, dir, stderr)
			proofs = append(proofs, stdout)
		}
		assert.Equal(t, proofs[0], proofs[1], "the proofs of op %d from two data dirs", id)
		assert.Equal(t, proofs[0], proofs[2], "the proofs of op %d from two data dirs", id)
		break
	}

	assert.Empty(t, lost, "ops that never ended")
	assert.Zero(t, counts[events.StateFailed], "failed ops: nothing in this load fails")
}

// chaosRequest is op id's request in the chaos test: one in four is in
// the workspace that holds exec ops.
func chaosRequest(d *deployment, id int) events.Request {
	req := d.execRequest(id)
	if id%4 == 0 {
		req.Workspace = clusterHeldWS
	}
	return req
}
