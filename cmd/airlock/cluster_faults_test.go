package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// instanceOf is the instance id of a data dir.
func instanceOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, app.InstanceFile))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// opEvents reads every event of op, decoded, trying again for a while
// when the cluster is still settling (a node just restarted).
func opEvents(t *testing.T, js jetstream.JetStream, op string) []*oplog.Event {
	t.Helper()
	var out []*oplog.Event
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if out, err = readOpEvents(js, clusterWS, op); err == nil {
			break
		}
	}
	require.NoError(t, err, "reading the events of %s", op)
	// Those that left the stream for the archive (ADR 0026), read after
	// it, in their places.
	seen := map[uint64]bool{}
	for _, e := range out {
		seen[e.Seq] = true
	}
	for _, m := range archived(t, js) {
		if _, id, _, _, ok := events.OpSubjectParts(m.Subject); !ok || id != op || seen[m.Seq] {
			continue
		}
		e, err := oplog.Decode(&jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Seq, Header: m.Header, Data: m.Data, Time: m.Time})
		require.NoError(t, err)
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *oplog.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

func readOpEvents(js jetstream.JetStream, ws, op string) ([]*oplog.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, streams.Ops)
	if err != nil {
		return nil, err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.OpFilter(ws, op)}})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil || info.NumPending == 0 {
		return nil, err
	}
	batch, err := cons.Fetch(int(info.NumPending), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		return nil, err
	}
	var out []*oplog.Event
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		ev, err := oplog.Decode(&jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: md.Timestamp})
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	if err := batch.Error(); err != nil {
		return nil, err
	}
	if uint64(len(out)) != info.NumPending {
		return nil, fmt.Errorf("read %d of %d events", len(out), info.NumPending)
	}
	return out, nil
}

// typesOf lists the events' verbs.
func typesOf(evs []*oplog.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type.Short())
	}
	return out
}

// submitUntilEnd submits req until it ends, within a deadline.
func submitUntilEnd(t *testing.T, c *producers.Client, req events.Request, within time.Duration) producers.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		out, err := c.Submit(ctx, req)
		if err == nil && out.Terminal() {
			return out
		}
		if ctx.Err() != nil {
			t.Fatalf("op did not end within %s: %+v %v", within, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// submitOnce publishes req and returns its op id, without waiting.
func submitOnce(t *testing.T, c *producers.Client, req events.Request) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := c.Submit(ctx, req)
	require.NoError(t, err)
	return out.OpID
}

// waitFor polls cond until it holds, within d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, d, 50*time.Millisecond, what)
}

// An Airlock process killed at each point of an exec, with the op then
// settled by another process of the deployment that has none of the dead
// one's files: killed before its started event (the claim) was stored, the
// op runs on the other; once started, it never runs again, and only the
// dead process, back, can say it completed.
func TestClusterAirlockKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const claimTimeout = "2s"
	t.Run("before the start", func(t *testing.T) {
		d := prepareDeployment(t, 2, "--claim-timeout", claimTimeout, "--log-level", "info")
		js := d.cluster.jetStream(t, d.set)
		d.startWith(0, []string{failpoint.EnvVar + "=" + failpoint.BeforeStart + ":exec"})
		c := d.agent(t, producers.WithWait(time.Second))
		op := submitOnce(t, c, d.execRequest(1))
		waitFor(t, 30*time.Second, "the process that took the op dies", func() bool { return d.procExited(0) })
		d.start(1)
		out := submitUntilEnd(t, c, d.execRequest(1), time.Minute)
		assert.Equal(t, events.StateCompleted, out.State, out.Message)
		assert.Equal(t, map[int]int{1: 1}, d.markerCounts(t))
		// The other process's gate took the request again and started
		// the op itself (ADR 0025).
		evs := opEvents(t, js, op)
		require.Equal(t, []string{"started", "completed"}, typesOf(evs))
		first := evs[0].Data.(*events.Started)
		require.NotNil(t, first.Decision, "the first event carries the decision")
		claim := first.Claim
		require.NotNil(t, claim)
		assert.Empty(t, claim.Recovers, "the dead process stored nothing to recover")
		assert.Greater(t, claim.Delivery, uint64(1), "a redelivery of the request")
		assert.Equal(t, streams.GateConsumer, claim.Consumer)
		assert.Equal(t, instanceOf(t, d.dirs[1]), claim.Instance, "the other process ran it")
		assert.Empty(t, ledgerLeft(t, d.dirs[1]))
	})
	t.Run("after the spawn", func(t *testing.T) {
		d := prepareDeployment(t, 2, "--claim-timeout", claimTimeout, "--owner-wait", "5s", "--log-level", "info")
		js := d.cluster.jetStream(t, d.set)
		d.start(0)
		c := d.agent(t, producers.WithWait(time.Second))
		req := d.slowExecRequest(2, 30)
		op := submitOnce(t, c, req)
		waitFor(t, 30*time.Second, "the exec ran", func() bool { return d.markerCounts(t)[2] == 1 })
		d.kill(0) // while the command runs
		d.start(1)
		out := submitUntilEnd(t, c, req, 2*time.Minute)
		assert.Equal(t, map[int]int{2: 1}, d.markerCounts(t), "never spawned again")
		assert.Equal(t, events.StateAmbiguous, out.State, out.Message)
		assert.Equal(t, events.CodeAmbiguous, out.Code)
		evs := opEvents(t, js, op)
		require.Equal(t, []string{"started", "ambiguous"}, typesOf(evs))
		amb := evs[1].Data.(*events.Ambiguous)
		host, _ := os.Hostname()
		assert.Equal(t, instanceOf(t, d.dirs[0]), amb.Instance, "names the instance that held the attempt")
		assert.Equal(t, events.CleanHost(host), amb.Host)
		assert.Contains(t, amb.Known, "instance "+amb.Instance+" on host ")
		assert.Contains(t, amb.Known, "never run again")
		// The dead process's ledger goes once it is back.
		d.start(0)
		waitFor(t, time.Minute, "the ended op's ledger is swept", func() bool { return len(ledgerLeft(t, d.dirs[0])) == 0 })
	})
	t.Run("after the effect", func(t *testing.T) {
		// Long enough for the dead process to come back.
		d := prepareDeployment(t, 2, "--claim-timeout", claimTimeout, "--owner-wait", "2m", "--log-level", "info")
		js := d.cluster.jetStream(t, d.set)
		d.startWith(0, []string{failpoint.EnvVar + "=" + failpoint.AfterEffect + ":exec"})
		c := d.agent(t, producers.WithWait(time.Second))
		op := submitOnce(t, c, d.execRequest(3))
		waitFor(t, 30*time.Second, "the process dies after the effect", func() bool { return d.procExited(0) })
		d.start(1)
		// The other process can tell nothing from its own files: it waits
		// for the one that made the attempt.
		waitFor(t, time.Minute, "the other process defers to the owner", func() bool {
			return len(d.grep("left to its own instance")) > 0
		})
		d.start(0) // back, without the failpoint: its ledger has the exit
		out := submitUntilEnd(t, c, d.execRequest(3), 2*time.Minute)
		assert.Equal(t, events.StateCompleted, out.State, out.Message)
		assert.Equal(t, map[int]int{3: 1}, d.markerCounts(t))
		evs := opEvents(t, js, op)
		require.Equal(t, []string{"started", "completed"}, typesOf(evs))
		done := evs[1].Data.(*events.Completed)
		assert.True(t, done.Recovered)
		assert.Equal(t, evs[0].Data.(*events.Started).Attempt, done.Attempt, "the lost attempt's own outcome")
		waitFor(t, time.Minute, "no ledger left", func() bool {
			return len(ledgerLeft(t, d.dirs[0]))+len(ledgerLeft(t, d.dirs[1])) == 0
		})
	})
}

// The ops stream's leader node killed while an exec runs, so that its
// outcome is appended during the election, and right after its outcome is
// stored: the op completes once, with its one marker line.
func TestClusterLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	t.Run("before the outcome append", func(t *testing.T) {
		d := newDeployment(t, 2, "--claim-timeout", "3s")
		js := d.cluster.jetStream(t, d.set)
		c := d.agent(t, producers.WithWait(time.Second))
		req := d.slowExecRequest(1, 2)
		op := submitOnce(t, c, req)
		waitFor(t, 30*time.Second, "the exec runs", func() bool { return d.markerCounts(t)[1] == 1 })
		node := d.cluster.node(leader(js, streams.Ops))
		require.NotNil(t, node, "the ops stream has a leader")
		node.kill()
		out := submitUntilEnd(t, c, req, 2*time.Minute)
		node.start(t)
		assert.Equal(t, events.StateCompleted, out.State, out.Message)
		assert.Equal(t, map[int]int{1: 1}, d.markerCounts(t))
		assert.Equal(t, []string{"started", "completed"}, typesOf(opEvents(t, js, op)))
	})
	t.Run("after the outcome append", func(t *testing.T) {
		d := prepareDeployment(t, 2, "--claim-timeout", "3s")
		js := d.cluster.jetStream(t, d.set)
		pause := []string{failpoint.EnvVar + "=" + failpoint.AfterResult + ":exec=pause:4s"}
		d.startWith(0, pause)
		d.startWith(1, pause)
		c := d.agent(t, producers.WithWait(time.Second))
		req := d.execRequest(2)
		op := submitOnce(t, c, req)
		ops, err := js.Stream(context.Background(), streams.Ops)
		require.NoError(t, err)
		waitFor(t, 30*time.Second, "the outcome is stored", func() bool {
			last, err := oplog.Last(context.Background(), ops, clusterWS, op)
			return err == nil && last.Type == events.TypeCompleted
		})
		node := d.cluster.node(leader(js, streams.Ops))
		require.NotNil(t, node)
		node.kill() // before the process acks the request (its work item)
		out := submitUntilEnd(t, c, req, 2*time.Minute)
		node.start(t)
		assert.Equal(t, events.StateCompleted, out.State, out.Message)
		assert.Equal(t, map[int]int{2: 1}, d.markerCounts(t))
		// A redelivery after the lost ack finds the op ended.
		time.Sleep(4 * time.Second)
		assert.Equal(t, []string{"started", "completed"}, typesOf(opEvents(t, js, op)))
		waitFor(t, time.Minute, "no ledger left", func() bool {
			return len(ledgerLeft(t, d.dirs[0]))+len(ledgerLeft(t, d.dirs[1])) == 0
		})
	})
}

// Load goes on through a node loss: ops submitted by one client, 16 in
// flight, keep completing once the cluster has a new leader, without
// waiting for the node to come back. Neither the client (one submit's
// lookup of the stream must not hold up the others) nor a gate (its check
// of the executors served must not wait on the lost node) may stall.
func TestClusterLoadGoesOnThroughANodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	d := newDeployment(t, 2, "--claim-timeout", "3s", "--log-level", "info")
	js := d.cluster.jetStream(t, d.set)
	c := d.agent(t, producers.WithWait(time.Minute))
	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var submitting [16]atomic.Pointer[inHand] // each worker's op in hand, for a failure message
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req := events.Request{Workspace: clusterWS, Agent: "agent", Tool: "echo", Args: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))}
				_, op := req.Identity()
				submitting[w].Store(&inHand{op: op, at: time.Now()})
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				out, err := c.Submit(ctx, req)
				for err == nil && !out.Terminal() && ctx.Err() == nil {
					out, err = c.Submit(ctx, req)
				}
				cancel()
				if err == nil && out.State == events.StateCompleted {
					done.Add(1)
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waitFor(t, time.Minute, "the load runs", func() bool { return done.Load() > 100 })
	dead := leader(js, streams.Ops)
	node := d.cluster.node(dead)
	require.NotNil(t, node)
	node.kill()
	killed := time.Now()
	defer node.start(t)
	// The elections are NATS's (each raft group's own timeout, a few
	// seconds, sometimes a second round): what is measured is the load
	// once every stream and durable consumer has a leader again, after
	// appends left without an answer have been given up and tried again.
	var why string
	waitFor(t, 45*time.Second, "every stream and durable consumer has a leader on a live node", func() bool {
		w := unled(js, dead)
		if w != why {
			t.Logf("%.1f s after the kill: %s", time.Since(killed).Seconds(), w)
		}
		why = w
		return why == ""
	})
	t.Logf("every leader elected %.1f s after the kill", time.Since(killed).Seconds())
	// The ops in flight at the kill end through their runners' retries
	// or, once a runner's record window (twice --claim-timeout) has
	// passed, through recovery after the gate's ack wait: the load is
	// measured once ops complete again, which must not take long.
	elected, deadline := done.Load(), time.Now().Add(30*time.Second)
	for done.Load() == elected {
		if time.Now().After(deadline) {
			t.Fatalf("no op completed in the 30 s after the election: %s", d.stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("ops complete again %.1f s after the kill", time.Since(killed).Seconds())
	before := done.Load()
	time.Sleep(10 * time.Second)
	after := done.Load()
	t.Logf("ops completed in the 10 s after they resumed, the node still down: %d", after-before)
	if !assert.Greater(t, after-before, int64(50), "ops go on completing while the node is down: %s", d.stderr()) {
		for w := range submitting {
			if s := submitting[w].Load(); s != nil {
				t.Logf("worker %d: %s submitted %.1f s after the kill: %s", w, s.op, s.at.Sub(killed).Seconds(), strings.Join(d.grep(s.op), "\n"))
			}
		}
	}
}

// inHand is the op a worker of a load test submitted last, and when.
type inHand struct {
	op string
	at time.Time
}

// unled names a stream of the pipeline, or a durable consumer of the
// gate's, without a leader other than the server named dead; "" when
// there is none.
func unled(js jetstream.JetStream, dead string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	led := func(c *jetstream.ClusterInfo) bool { return c != nil && c.Leader != "" && c.Leader != dead }
	for _, name := range []string{streams.Requests, streams.Ops, streams.Results, streams.Held} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return name + ": " + err.Error()
		}
		if !led(st.CachedInfo().Cluster) {
			return name + ": no leader"
		}
	}
	for _, c := range [][2]string{{streams.Requests, streams.GateConsumer}, {streams.Ops, streams.ResumeConsumer}} {
		cons, err := js.Consumer(ctx, c[0], c[1])
		if err != nil {
			return c[1] + ": " + err.Error()
		}
		if !led(cons.CachedInfo().Cluster) {
			return c[1] + ": no leader"
		}
	}
	return ""
}

// Three processes started at the same moment on a cluster that has never
// held Airlock's streams all come up: provisioning waits for the meta
// leader and for each other, within the start deadline.
func TestClusterProcessesStartTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	d := prepareDeployment(t, 3)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			s, err := launchServe(d.dirs[i], nil, d.args...)
			if err == nil {
				d.mu.Lock()
				d.procs[i] = s
				d.all = append(d.all, s)
				d.mu.Unlock()
			}
			errs <- err
		}()
	}
	for range 3 {
		require.NoError(t, <-errs) // the checks below read each process
	}
	c := d.agent(t, producers.WithWait(10*time.Second))
	out := submitUntilEnd(t, c, d.execRequest(1), time.Minute)
	assert.Equal(t, events.StateCompleted, out.State)
	// The policy all three loaded is recorded once.
	js := d.cluster.jetStream(t, d.set)
	st, err := js.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(events.PolicySubject))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Subjects[events.PolicySubject], "one policy.loaded for three gates starting with one policy")
	for i := range 3 {
		assert.NotContains(t, d.proc(i).stderr.String(), `"level":"ERROR"`)
	}
}

// slowExecRequest is op id's exec request that appends id to the marker
// file and then sleeps for secs seconds.
func (d *deployment) slowExecRequest(id, secs int) events.Request {
	r := d.execRequest(id)
	r.Args = []byte(fmt.Sprintf(`{"argv":["/bin/sh","-c","echo %d >> %s; sleep %d"],"timeout_ms":%d}`, id, d.marker(), secs, (secs+30)*1000))
	return r
}

// procExited reports whether process i has exited on its own.
func (d *deployment) procExited(i int) bool {
	s := d.proc(i)
	if s == nil {
		return true
	}
	select {
	case <-s.done:
		d.mu.Lock()
		d.procs[i] = nil
		d.mu.Unlock()
		return true
	default:
		return false
	}
}

// Retries of ops whose events left the ops stream for the archive, sent
// after the archive stream's leader node is killed, and again after the
// node is back: each op ran once, and each retry is answered with the
// op's own outcome (ADR 0026). Each settle's read of the ops floor goes
// to the archive stream's new leader (with --archive-keep 0, every
// settle reads; ADR 0030).
func TestClusterRetryOfArchivedOpsThroughALeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	d := newDeployment(t, 2, "--archive-after", "1s", "--archive-keep", "0")
	js := d.cluster.jetStream(t, d.set)
	c := d.agent(t, producers.WithWait(5*time.Second))
	ops, err := js.Stream(context.Background(), streams.Ops)
	require.NoError(t, err)
	const n = 6
	first := make([]producers.Outcome, n)
	for i := range n {
		first[i] = submitUntilEnd(t, c, d.execRequest(100+i), time.Minute)
		require.Equal(t, events.StateCompleted, first[i].State, first[i].Message)
	}
	for i := range n {
		waitFor(t, time.Minute, "op left the ops stream", func() bool {
			_, err := oplog.Last(context.Background(), ops, clusterWS, first[i].OpID)
			return errors.Is(err, oplog.ErrEmpty)
		})
	}
	retry := func(round string) {
		for i := range n {
			out := submitUntilEnd(t, c, d.execRequest(100+i), 2*time.Minute)
			assert.Equal(t, first[i].OpID, out.OpID, "%s: op %d", round, i)
			assert.Equal(t, events.StateCompleted, out.State, "%s: op %d: %s", round, i, out.Message)
			assert.Equal(t, first[i].ResultDigest, out.ResultDigest, "%s: op %d: its own outcome", round, i)
			if last, err := oplog.Last(context.Background(), ops, clusterWS, first[i].OpID); err == nil {
				assert.NotEmpty(t, last.Header.Get(events.HeaderRestates), "%s: op %d: answered from the archive", round, i)
			}
		}
	}
	name := leader(js, streams.Archive)
	node := d.cluster.node(name)
	require.NotNil(t, node, "the archive stream has a leader")
	node.kill()
	retry("after the archive's leader was killed")
	waitFor(t, time.Minute, "a new leader", func() bool {
		l := leader(js, streams.Archive)
		return l != "" && l != name
	})
	node.start(t)
	retry("with the node back")
	want := map[int]int{}
	for i := range n {
		want[100+i] = 1
	}
	assert.Equal(t, want, d.markerCounts(t), "every op ran once")
	d.checkAlive()
}
