package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/metrics"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// clusterWS is the workspace the cluster tests' ops run in.
const clusterWS = "cluster"

// clusterHeldWS is the deployment's workspace in mode confirm: its exec
// ops are held until an approver grants them.
const clusterHeldWS = "cluster-held"

// deployment is a three-node NATS cluster and n `airlock serve` processes
// on it, each with its own data dir, as deploy/README.md runs them.
type deployment struct {
	t       testing.TB
	cluster *natsCluster
	set     *authority.Set
	dirs    []string
	root    string // the workspace root, shared by every process (one host)
	policy  string
	args    []string
	env     []string
	// extra is process i's own serve args, after args (its executor
	// group, say), for every start of it.
	extra map[int][]string

	mu    sync.Mutex
	procs []*server // nil while a process is down
	all   []*server // every process ever started, by start
	// startFailures counts starts of serve that exited before serving.
	startFailures int
	kills         int
}

// newDeployment starts the cluster and n Airlock processes, one after the
// other, with --replicas 3 and the extra serve args.
func newDeployment(t testing.TB, n int, extra ...string) *deployment {
	t.Helper()
	d := prepareDeployment(t, n, extra...)
	for i := range n {
		d.start(i)
	}
	return d
}

// prepareDeployment starts the cluster and makes the data dirs of n
// Airlock processes, none of which it starts.
func prepareDeployment(t testing.TB, n int, extra ...string) *deployment {
	t.Helper()
	dirs, set := clusterData(t, n)
	d := &deployment{t: t, set: set, dirs: dirs, root: t.TempDir(), procs: make([]*server, n)}
	d.cluster = startCluster(t, set)
	d.policy = filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(d.policy, []byte(fmt.Sprintf(
		"tools: {exec: exec, apply_patch: write, echo: read, count: write}\ndefault_mode: auto\nworkspaces:\n  %[1]s: {mode: auto, root: %[3]q}\n  %[2]s: {mode: confirm, root: %[3]q}\n",
		clusterWS, clusterHeldWS, d.root)), 0o600))
	d.args = append([]string{"--nats-url", d.cluster.urls(), "--replicas", "3", "--policy", d.policy, "--metrics", "127.0.0.1:0"}, extra...)
	t.Cleanup(func() {
		for i := range d.procs {
			d.kill(i)
		}
	})
	return d
}

// start starts process i, trying again (a start can fail while the
// cluster has no leader) for up to two minutes.
func (d *deployment) start(i int) { d.startWith(i, nil) }

// startWith starts process i as start does, with env added to its
// environment (a failpoint).
func (d *deployment) startWith(i int, env []string) {
	d.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := launchServe(d.dirs[i], append(slices.Clone(d.env), env...), append(slices.Clone(d.args), d.extra[i]...)...)
		if err == nil {
			d.mu.Lock()
			d.procs[i] = s
			d.all = append(d.all, s)
			d.mu.Unlock()
			return
		}
		d.mu.Lock()
		d.startFailures++
		d.mu.Unlock()
		d.t.Logf("airlock %d did not start: %v", i, err)
		if time.Now().After(deadline) {
			d.t.Fatalf("airlock %d did not start in two minutes: %v", i, err)
		}
		time.Sleep(time.Second)
	}
}

// kill SIGKILLs process i, if it runs. A process that had already
// exited on its own is a failure of the test.
func (d *deployment) kill(i int) {
	d.mu.Lock()
	s := d.procs[i]
	d.procs[i] = nil
	d.mu.Unlock()
	if s == nil {
		return
	}
	select {
	case <-s.done:
		d.t.Errorf("airlock %d exited on its own: %s", i, tail(s.stderr.String(), 4000))
	default:
	}
	s.kill()
	d.mu.Lock()
	d.kills++
	d.mu.Unlock()
}

// checkAlive fails the test for every process that exited on its own.
func (d *deployment) checkAlive() {
	d.t.Helper()
	for i := range d.procs {
		if s := d.proc(i); s != nil {
			select {
			case <-s.done:
				d.t.Errorf("airlock %d exited on its own: %s", i, tail(s.stderr.String(), 4000))
			default:
			}
		}
	}
}

// stop ends process i with SIGTERM, as an operator does, and waits.
func (d *deployment) stop(i int) {
	d.t.Helper()
	d.mu.Lock()
	s := d.procs[i]
	d.procs[i] = nil
	d.mu.Unlock()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, err := s.stop(ctx)
	require.NoError(d.t, err)
	require.Equal(d.t, 0, code, "airlock serve %s: %s", s.dir, s.stderr.String())
}

// proc is process i, nil while it is down.
func (d *deployment) proc(i int) *server {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.procs[i]
}

// grep returns the log lines of every process ever started that contain
// s.
func (d *deployment) grep(s string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for i, p := range d.all {
		for _, line := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(line, s) {
				out = append(out, fmt.Sprintf("start %d (%s): %s", i, filepath.Base(p.dir), line))
			}
		}
	}
	return out
}

// stderr is every process's log, for a failure message.
func (d *deployment) stderr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for i, s := range d.procs {
		if s != nil {
			fmt.Fprintf(&b, "\n--- airlock %d:\n%s", i, tail(s.stderr.String(), 4000))
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// agent is a client of the deployment as the agent principal, connected
// to every node and reconnecting for ever.
func (d *deployment) agent(t testing.TB, opts ...producers.Option) *producers.Client {
	t.Helper()
	opt, err := authority.ConnectOption(d.set.CredsPath("agent"))
	require.NoError(t, err)
	nc, err := nats.Connect(d.cluster.urls(), opt, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := producers.New(nc, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// approver connects as the deployment's approver.
func (d *deployment) approver(t testing.TB) *producers.Approver {
	t.Helper()
	opt, err := authority.ConnectOption(d.set.CredsPath("approver"))
	require.NoError(t, err)
	seed, err := authority.Seed(d.set.CredsPath("approver"))
	require.NoError(t, err)
	nc, err := nats.Connect(d.cluster.urls(), opt, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ap, err := producers.NewApprover(nc, "approver", producers.WithApproverKey(seed))
	require.NoError(t, err)
	return ap
}

// marker is the file every exec op of the deployment appends its id to.
func (d *deployment) marker() string { return filepath.Join(d.root, "marker") }

// execRequest is op id's exec request: it appends id to the marker file.
func (d *deployment) execRequest(id int) events.Request {
	args, _ := json.Marshal(map[string]any{"argv": []string{"/bin/sh", "-c", fmt.Sprintf("echo %d >> %s", id, d.marker())}})
	return events.Request{Workspace: clusterWS, Agent: "agent", Tool: "exec", Args: args}
}

// markerCounts counts the marker lines of each id.
func (d *deployment) markerCounts(t testing.TB) map[int]int {
	t.Helper()
	counts := map[int]int{}
	f, err := os.Open(d.marker())
	if os.IsNotExist(err) {
		return counts
	}
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		require.NoError(t, err, "marker line %q", sc.Text())
		counts[n]++
	}
	require.NoError(t, sc.Err())
	return counts
}

// appliedSeq is process s's projector position, from its metrics.
func appliedSeq(s *server) (uint64, error) {
	resp, err := http.Get(s.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), metrics.ProjectorSeq+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return uint64(f), err
		}
	}
	return 0, fmt.Errorf("no %s in %s", metrics.ProjectorSeq, s.metrics)
}

// waitCaughtUp waits until every running process's projector has applied
// the whole ops stream, and the stream stays still for a moment.
func (d *deployment) waitCaughtUp(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	var last uint64
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		seq, err := opsStreamLast(ctx, js)
		if err != nil {
			return false
		}
		for i := range d.procs {
			s := d.proc(i)
			if s == nil {
				continue
			}
			if got, err := appliedSeq(s); err != nil || got < seq {
				return false
			}
		}
		stable := seq == last
		last = seq
		return stable
	}, 2*time.Minute, 500*time.Millisecond, "projectors did not catch up: %s", d.stderr())
	return last
}

// opTally is what the stream holds of one op.
type opTally struct {
	terminals int
	last      events.Type
	// archived counts the events read from the archive: they had left the
	// stream.
	archived int
}

// tallyOps reads every op event of the workspaces once and counts each op's
// terminal events. A read that fails (the cluster still settling after the
// last kill) goes on from where it stopped.
func tallyOps(t testing.TB, js jetstream.JetStream) map[string]*opTally {
	t.Helper()
	out := map[string]*opTally{}
	seen := map[uint64]bool{}
	var next uint64 // the stream sequence to read from; 0 for the start
	var err error
	for tries := 0; tries < 30; tries++ {
		if next, err = tallyFrom(js, next, out, seen); err == nil {
			break
		}
		t.Logf("reading the ops stream from %d: %v; again", next, err)
		time.Sleep(time.Second)
	}
	require.NoError(t, err, "reading the ops stream")
	// Ended ops' events that left the stream, read after it: whatever a
	// purge took while the stream was read is there.
	for _, m := range archived(t, js) {
		if !seen[m.Seq] {
			if tl := tallyMsg(out, m.Subject, m.Header); tl != nil {
				tl.archived++
			}
		}
	}
	return out
}

// archived reads every message of the archive's segments (ADR 0026).
func archived(t testing.TB, js jetstream.JetStream) []archive.Msg {
	t.Helper()
	a := archive.New(js)
	var out []archive.Msg
	var err error
	for tries := 0; tries < 30; tries++ {
		// Each try has its own time-out: a request whose answer is lost
		// (its leader killed meanwhile) must not use up the others'.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err = nil, nil
		var last uint64
		if _, last, err = a.Tail(ctx); err == nil {
			for seq := uint64(1); seq <= last && err == nil; {
				var s *archive.Segment
				var at uint64
				if s, at, err = a.Segment(ctx, seq); err == nil {
					out = append(out, s.Msgs...)
					seq = at + 1
				}
			}
		}
		cancel()
		if err == nil {
			return out
		}
		t.Logf("reading the archive: %v; again", err)
		time.Sleep(time.Second)
	}
	require.NoError(t, err, "reading the archive")
	return nil
}

// tallyMsg counts an op event of the deployment's workspaces into out; an outcome
// stated again for a retry of an archived op is no new outcome.
func tallyMsg(out map[string]*opTally, subject string, h nats.Header) *opTally {
	ws, op, _, verb, ok := events.OpSubjectParts(subject)
	if !ok || (ws != clusterWS && ws != clusterHeldWS) || h.Get(events.HeaderRestates) != "" {
		return nil
	}
	tl := out[op]
	if tl == nil {
		tl = &opTally{}
		out[op] = tl
	}
	tl.last = events.Type(h.Get(events.HeaderPrefix + "type"))
	switch verb {
	case "completed", "failed", "ambiguous", "denied", "expired":
		tl.terminals++
	}
	return tl
}

// tallyFrom reads the deployment's workspaces' op events from seq on (0: the first)
// into out, and returns where to go on from when it fails.
func tallyFrom(js jetstream.JetStream, seq uint64, out map[string]*opTally, seen map[uint64]bool) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc := jetstream.OrderedConsumerConfig{FilterSubjects: []string{"airlock.v1.op." + clusterWS + ".>", "airlock.v1.op." + clusterHeldWS + ".>"}}
	if seq > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq
	}
	cons, err := js.OrderedConsumer(ctx, streams.Ops, cc)
	if err != nil {
		return seq, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return seq, err
	}
	for left := int(info.NumPending); left > 0; {
		batch, err := cons.Fetch(min(left, 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return seq, err
		}
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return seq, err
			}
			n++
			seq = md.Sequence.Stream + 1
			if _, _, _, _, ok := events.OpSubjectParts(m.Subject()); !ok {
				return seq, fmt.Errorf("not an op subject: %s", m.Subject())
			}
			seen[md.Sequence.Stream] = true
			tallyMsg(out, m.Subject(), m.Headers())
		}
		if err := batch.Error(); err != nil {
			return seq, err
		}
		if n == 0 {
			return seq, errors.New("no progress reading the ops stream")
		}
		left -= n
	}
	return seq, nil
}

// verifyAll stops every process cleanly and runs `audit verify` on each
// data dir: each must be sound, and all must be one log.
func (d *deployment) verifyAll(t testing.TB) []verifyJSON {
	t.Helper()
	d.checkAlive()
	for i := range d.procs {
		d.stop(i)
	}
	var out []verifyJSON
	for _, dir := range d.dirs {
		v, code, errOut := auditVerify(t, "--data", dir)
		require.Equal(t, 0, code, "audit verify %s: %+v %s", dir, v, errOut)
		out = append(out, v)
	}
	return out
}
