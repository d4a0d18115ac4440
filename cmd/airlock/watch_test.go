package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/internal/watch"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const watchPolicy = `# review holds every class but read for an approver
tools:
  echo: read
  count: write
default_mode: auto
workspaces:
  review:
    mode: confirm
hold_ttl: 10m
`

// watchProc is one `airlock watch` subprocess, its stdout a pipe.
type watchProc struct {
	cmd    *exec.Cmd
	stdout *testenv.Buffer
	stderr *testenv.Buffer
	done   chan struct{}
}

// startWatch runs airlock watch against srv and waits until it says it
// is watching.
func startWatch(t *testing.T, srv *server, args ...string) *watchProc {
	t.Helper()
	w := &watchProc{stdout: &testenv.Buffer{}, stderr: &testenv.Buffer{}, done: make(chan struct{})}
	w.cmd = exec.Command(binary, append([]string{"watch", "--server=" + srv.url, "--data=" + srv.dir}, args...)...)
	w.cmd.Stdout, w.cmd.Stderr = w.stdout, w.stderr
	require.NoError(t, w.cmd.Start())
	go func() {
		_ = w.cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.done
	})
	require.Eventually(t, func() bool {
		select {
		case <-w.done:
			t.Fatalf("airlock watch %v exited: %s", args, w.stderr.String())
		default:
		}
		return strings.Contains(w.stderr.String(), "watching ")
	}, 30*time.Second, 10*time.Millisecond, "airlock watch did not start")
	return w
}

// lines waits until w has printed n lines and returns them.
func (w *watchProc) lines(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	require.Eventually(t, func() bool {
		got = strings.Split(strings.TrimSuffix(w.stdout.String(), "\n"), "\n")
		if got[0] == "" {
			got = nil
		}
		return len(got) >= n
	}, 30*time.Second, 10*time.Millisecond, "want %d lines, have:\n%s", n, w.stdout.String())
	require.Len(t, got, n, "no more than %d lines", n)
	return got
}

// stop interrupts w as Ctrl-C does and returns its exit code.
func (w *watchProc) stop(t *testing.T) int {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("airlock watch did not stop on SIGINT")
	}
	return w.cmd.ProcessState.ExitCode()
}

// What changes from run to run: times, attempt ids, durations, the
// policy file's path. JSON stays JSON.
var runSpecific = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`), "YYYY-MM-DDThh:mm:ss.sssZ"},
	{regexp.MustCompile(`attempt=\S+`), "attempt=ATTEMPT"},
	{regexp.MustCompile(`"attempt":"[^"]*"`), `"attempt":"ATTEMPT"`},
	{regexp.MustCompile(`duration=\S+`), "duration=DURATION"},
	{regexp.MustCompile(`"duration_ms":\d+`), `"duration_ms":0`},
	{regexp.MustCompile(`source=\S+`), "source=POLICY_FILE"},
	{regexp.MustCompile(`"source":"[^"]*"`), `"source":"POLICY_FILE"`},
}

func normalise(s string) string {
	for _, r := range runSpecific {
		s = r.re.ReplaceAllString(s, r.with)
	}
	return s
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create it")
	assert.Equal(t, string(want), got)
}

// A scripted run against a real Airlock: an auto-allowed op, a held op
// that is granted and runs, a denied op, a held op an approver denies, a
// rejected request, a message stored on an op subject that is not an
// event, an event published on a live subject that AIRLOCK_OPS never
// stored, a lockdown and a policy reload, as three watchers print them:
// every workspace as lines and as JSON, and one workspace.
func TestWatchGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(watchPolicy), 0o600))
	srv := startServer(t, t.TempDir(), freePort(t), []string{"AIRLOCK_TEST_LEDGER=" + t.TempDir()}, "--policy", pol)

	all := startWatch(t, srv)
	asJSON := startWatch(t, srv, "--json")
	review := startWatch(t, srv, "--ws", "review")
	assert.Contains(t, review.stderr.String(), "watching airlock.v1.live.op.review.>, airlock.v1.live.rejected.review, airlock.v1.live.sys.mode.review, airlock.v1.live.sys.policy on nats://")
	assert.Contains(t, all.stderr.String(), "watching airlock.v1.live.> on nats://")
	assert.Contains(t, all.stderr.String(), " as auditor ")
	n := 0
	step := func(events int) {
		t.Helper()
		n += events
		all.lines(t, n)
	}
	submit := func(ws, tool, args string, wantCode int) string {
		t.Helper()
		out, _, code := srv.run(t, "submit", "--ws", ws, "--tool", tool, "--args", args, "--json")
		require.Equal(t, wantCode, code, out)
		var got struct {
			OpID string `json:"op_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		return got.OpID
	}
	resolve := func(verb, opID, reason string) {
		t.Helper()
		// The projection shows the hold a moment after the event.
		require.Eventually(t, func() bool {
			_, _, code := srv.run(t, "holds", verb, events.HoldID(opID), "--reason", reason)
			return code == 0
		}, 10*time.Second, 50*time.Millisecond)
	}

	submit("demo", "echo", `{"n":1}`, 0) // started (with the decision), completed
	step(2)
	granted := submit("review", "count", `{"f":1}`, 3) // held
	step(1)
	resolve("grant", granted, "reviewed") // granted, started (with the decision), completed
	step(3)
	submit("demo", "format_disk", `{}`, 4) // denied
	step(1)
	denied := submit("review", "count", `{"f":2}`, 3) // held
	step(1)
	resolve("deny", denied, "too big") // denied
	step(1)
	// A request that is not a CloudEvent: rejected.
	agent := srv.connect(t, "agent")
	require.NoError(t, agent.Publish(events.RequestSubject("demo", "agent"), []byte("not an event")))
	require.NoError(t, agent.Flush())
	step(1)
	// Something that is not an event, published on an op subject by the
	// service principal: AIRLOCK_OPS stores whatever it publishes there,
	// so it is shown, as stored and undecodable, and the watch goes on.
	svc := srv.connect(t, authority.ServiceName)
	require.NoError(t, svc.Publish(events.OpEventSubject("demo", "op_00000000000000000000000000000000", "echo", events.TypeCompleted), []byte("not an event")))
	require.NoError(t, svc.Flush())
	step(1)
	// A valid event published straight on a live subject, by the same
	// principal: the stream never stored it, so it is shown as
	// undecodable, as it arrived, never as a completed op.
	forged, err := events.NewEvent(events.TypeCompleted, "airlock/test", "", &events.Completed{
		OpHeader: events.OpHeader{OpID: "op_11111111111111111111111111111111", Workspace: "demo"}, Attempt: "a", ResultDigest: "sha256:00",
	})
	require.NoError(t, err)
	require.NoError(t, svc.PublishMsg(events.Encode(events.LiveSubject(events.OpEventSubject("demo", "op_11111111111111111111111111111111", "echo", events.TypeCompleted)), forged)))
	require.NoError(t, svc.Flush())
	step(1)
	out, _, code := srv.run(t, "ctl", "mode", "demo", "locked", "--reason", "incident 42") // mode.set
	require.Equal(t, 0, code, out)
	step(1)
	require.NoError(t, os.WriteFile(pol, []byte(strings.Replace(watchPolicy, "hold_ttl: 10m", "hold_ttl: 20m", 1)), 0o600))
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGHUP)) // policy.loaded
	step(1)

	lines := all.lines(t, n)
	jsonLines := asJSON.lines(t, n)
	// One workspace: its op events, and the policy load, which holds for
	// every workspace; the same lines as the full watch's.
	var want []string
	for _, l := range lines {
		if f := strings.Fields(l); f[1] == "review" || f[4] == "policy.loaded" {
			want = append(want, l)
		}
	}
	require.Len(t, want, 7)
	reviewLines := review.lines(t, len(want))
	for _, w := range []*watchProc{all, asJSON, review} {
		assert.Equal(t, 0, w.stop(t), "Ctrl-C is a clean exit")
		assert.NotContains(t, w.stderr.String(), "airlock:", "no errors, nothing dropped")
	}
	assert.Equal(t, normalise(strings.Join(want, "\n")), normalise(strings.Join(reviewLines, "\n")))

	got := normalise(strings.Join(lines, "\n") + "\n")
	golden(t, "watch.golden", got)
	golden(t, "watch-json.golden", normalise(strings.Join(jsonLines, "\n")+"\n"))
	assert.Equal(t, 2, strings.Count(got, " undecodable "))
	assert.Equal(t, 1, strings.Count(got, " rejected "))
	assert.Equal(t, 1, strings.Count(got, "not a message AIRLOCK_OPS stored"))
	completed := 0
	for _, l := range lines {
		if strings.Fields(l)[4] == "completed" {
			completed++
		}
	}
	assert.Equal(t, 2, completed, "the two ops that ran, never the forged event")
	// Every event as stored: its sequence in AIRLOCK_OPS, in stream
	// order, and the subject and time the stream gave it. Only the
	// forged one has none.
	ctx := context.Background()
	js, err := jetstream.New(svc)
	require.NoError(t, err)
	ops, err := js.Stream(ctx, streams.Ops)
	require.NoError(t, err)
	var last uint64
	for _, l := range jsonLines {
		var e struct {
			Time    string `json:"time"`
			Seq     uint64 `json:"seq"`
			Event   string `json:"event"`
			Subject string `json:"subject"`
			Error   string `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		require.NotEmpty(t, e.Time, l)
		require.NotEmpty(t, e.Event, l)
		require.NotEmpty(t, e.Subject, l)
		if strings.HasPrefix(e.Error, "not a message AIRLOCK_OPS stored") {
			assert.Zero(t, e.Seq, l)
			assert.NotContains(t, l, `"seq"`)
			assert.True(t, strings.HasPrefix(e.Subject, events.LivePrefix), l)
			continue
		}
		assert.Greater(t, e.Seq, last, "in stream order: %s", l)
		last = e.Seq
		stored, err := ops.GetMsg(ctx, e.Seq)
		require.NoError(t, err, l)
		assert.Equal(t, stored.Subject, e.Subject, l)
		assert.Equal(t, stored.Time.UTC().Format(watch.TimeLayout), e.Time, "the stored time: %s", l)
	}
	// Never the args: the events carry digests only.
	for _, arg := range []string{`"f"`, `"n"`, `{"n":1}`} {
		assert.NotContains(t, got, arg)
		assert.NotContains(t, strings.Join(jsonLines, "\n"), arg)
	}
}

// An agent may not watch: the server refuses its subscriptions and watch
// says so. A bad workspace is a usage error.
func TestWatchRefusedAndUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	srv := startServer(t, t.TempDir(), freePort(t), nil)
	_, stderr, code := srv.run(t, "watch", "--creds", filepath.Join(srv.dir, authority.CredsDir, "agent"+authority.CredsExt))
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "watching needs an approver, operator or auditor credential")
	for _, args := range [][]string{{"watch", "--ws", "BAD"}, {"watch", "extra"}, {"watch", "--frobnicate"}} {
		_, stderr, code := srv.run(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
	}
	_, stderr, code = run(t, "watch", "--server=nats://"+freePort(t))
	assert.Equal(t, 1, code, stderr)
}

// republished is body as AIRLOCK_OPS republishes it once stored at seq on
// subject.
func republished(t *testing.T, seq uint64, subject string, typ events.Type, data any) *nats.Msg {
	t.Helper()
	body, err := events.MarshalJSON(data)
	require.NoError(t, err)
	ev, err := events.NewEventRaw(typ, "airlock/gate", "", fmt.Sprintf("id%d", seq), body)
	require.NoError(t, err)
	m := events.Encode(events.LiveSubject(subject), ev)
	m.Header.Set("Nats-Stream", "AIRLOCK_OPS")
	m.Header.Set("Nats-Subject", subject)
	m.Header.Set("Nats-Sequence", fmt.Sprint(seq))
	m.Header.Set("Nats-Time-Stamp", "2026-11-29T12:00:00.000000001Z")
	m.Header.Set("Nats-Last-Sequence", "0")
	return m
}

// Watching every workspace, a gap in the stream's sequences is reported
// as missed events, and a repeated sequence is shown once; watching one
// workspace, gaps are other workspaces' events and say nothing.
func TestWatchReportsGapsAndRepeats(t *testing.T) {
	policy := func(seq uint64) *nats.Msg {
		return republished(t, seq, events.PolicySubject, events.TypePolicyLoaded,
			&events.PolicyLoaded{Hash: "sha256:" + strings.Repeat("a", 64), Source: "built-in"})
	}
	for _, tc := range []struct {
		ws         string
		wantLines  int
		wantStderr string
	}{
		{ws: "", wantLines: 3, wantStderr: "airlock: missed 2 events (AIRLOCK_OPS 3 to 4)"},
		{ws: "demo", wantLines: 3},
	} {
		w := &watcher{ws: tc.ws, msgs: make(chan *nats.Msg, 8), conn: make(chan connState, 1)}
		for _, seq := range []uint64{1, 2, 5, 5, 2} {
			w.msgs <- policy(seq)
		}
		ctx, cancel := context.WithCancel(context.Background())
		out, errOut := &testenv.Buffer{}, &testenv.Buffer{}
		done := make(chan error, 1)
		go func() { done <- w.lines(ctx, out, errOut, true) }()
		// Printed without waiting for another event, though the burst
		// ends with repeats.
		require.Eventually(t, func() bool { return strings.Count(out.String(), "\n") == tc.wantLines }, 5*time.Second, 5*time.Millisecond, out.String())
		cancel()
		require.NoError(t, <-done)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		assert.Len(t, lines, tc.wantLines, out.String())
		for i, seq := range []string{`"seq":1`, `"seq":2`, `"seq":5`} {
			assert.Contains(t, lines[i], seq)
		}
		if tc.wantStderr == "" {
			assert.Empty(t, errOut.String())
		} else {
			assert.Contains(t, errOut.String(), tc.wantStderr)
		}
	}
}

// What watch says about the live feed: nothing when an Airlock turned it
// on for the watch's subscription, and that none answered when no Airlock
// runs on the server.
func TestWatchAsksForTheLiveFeed(t *testing.T) {
	bare := testenv.StartNATS(t, streams.Config{})
	_, err := bare.Conn.SubscribeSync(events.LiveSubjects)
	require.NoError(t, err)
	err = ensureLive(bare.Conn)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no Airlock answered")

	a := apptest.StartApp(t, app.Config{})
	nc, err := nats.Connect(a.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	err = ensureLive(nc)
	require.Error(t, err, "no subscription: Airlock sees none")
	assert.Contains(t, err.Error(), "the live feed is off")
	_, err = nc.SubscribeSync(events.LivePrefix + "op.>")
	require.NoError(t, err)
	require.NoError(t, ensureLive(nc))
	assert.True(t, a.Live.On())
}

// A watch outlives a restart of the Airlock it watches: it says it lost
// the connection and got it back, asks for the live feed again (the new
// process starts with it off), and shows the ops that run after.
func TestWatchAcrossARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir, addr := t.TempDir(), freePort(t)
	srv := startServer(t, dir, addr, nil)
	w := startWatch(t, srv, "--json")
	submit := func(srv *server, n int) {
		t.Helper()
		out, stderr, code := srv.run(t, "submit", "--ws", "demo", "--tool", "echo", "--args", fmt.Sprintf(`{"n":%d}`, n))
		require.Equal(t, 0, code, "%s%s", out, stderr)
	}
	submit(srv, 1)
	w.lines(t, 2) // started (with the decision), completed

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := srv.stop(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, code, srv.stderr.String())
	require.Eventually(t, func() bool { return strings.Contains(w.stderr.String(), "disconnected") }, 30*time.Second, 10*time.Millisecond, w.stderr.String())

	srv = startServer(t, dir, addr, nil)
	require.Eventually(t, func() bool { return strings.Contains(w.stderr.String(), "reconnected at ") }, 60*time.Second, 10*time.Millisecond, w.stderr.String())
	submit(srv, 2)
	lines := w.lines(t, 4)
	var last struct {
		Event string `json:"event"`
		Seq   uint64 `json:"seq"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[3]), &last), lines[3])
	assert.Equal(t, "completed", last.Event)
	assert.Equal(t, uint64(5), last.Seq, "the policy loaded at the first start, then two ops of two events")
	assert.NotContains(t, w.stderr.String(), "live feed", "no complaint about the feed")
	assert.Equal(t, 0, w.stop(t))
}
