package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/testenv"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// natsCLIVersion is the nats CLI the operability test drives: the tool
// Airlock's users already watch JetStream with.
const natsCLIVersion = "v0.5.0"

// natsCLI is the nats CLI binary, built once per machine into the user's
// cache directory (or named by AIRLOCK_NATS_CLI). TestMain starts the
// build in the background so that it overlaps the other tests.
var natsCLI = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("AIRLOCK_NATS_CLI"); p != "" {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "airlock-test", "natscli-"+natsCLIVersion)
	bin := filepath.Join(dir, "nats")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// go install pkg@version builds outside this module, with the CLI's own
	// go.mod; the temporary GOBIN makes the final rename atomic. A build
	// cut short by the end of an earlier test run leaves its directory.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), "build-*"))
	for _, d := range stale {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > time.Hour {
			_ = os.RemoveAll(d)
		}
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/nats-io/natscli/nats@"+natsCLIVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build nats CLI %s: %w\n%s", natsCLIVersion, err, out.String())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(tmp, "nats"), bin); err != nil {
		return "", err
	}
	return bin, nil
})

// nats runs the nats CLI against s as the principal named and returns
// its combined output.
func (s *server) nats(t *testing.T, ctx context.Context, principal string, args ...string) (string, error) {
	t.Helper()
	bin, err := natsCLI()
	require.NoError(t, err)
	creds := filepath.Join(s.dir, authority.CredsDir, principal+authority.CredsExt)
	cmd := exec.CommandContext(ctx, bin, append([]string{"--server", s.url, "--nkey", creds, "--no-context"}, args...)...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "HOME="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// natsSub starts `nats sub SUBJECT` as the principal named and returns,
// once the subscription is in place, a function that waits until its
// output holds every string wanted (or fails the test) and stops it.
// The subscription is in place when a probe the service principal
// publishes on probe (a subject the subscription matches, stored by no
// stream) comes out, and, for a subject of the live feed, when Airlock has
// said the feed is on.
func (s *server) natsSub(t *testing.T, ctx context.Context, principal, subject, probe string) func(want ...string) string {
	t.Helper()
	bin, err := natsCLI()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(ctx)
	creds := filepath.Join(s.dir, authority.CredsDir, principal+authority.CredsExt)
	cmd := exec.CommandContext(ctx, bin, "--server", s.url, "--nkey", creds, "--no-context", "sub", subject)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "HOME="+t.TempDir())
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	svc := s.connect(t, authority.ServiceName)
	require.Eventually(t, func() bool {
		_ = svc.Publish(probe, []byte("probe"))
		return strings.Contains(out.String(), probe)
	}, 30*time.Second, 100*time.Millisecond, "nats sub %s as %s never got its probe: %s", subject, principal, out.String())
	if natsserver.SubjectsCollide(subject, events.LiveSubjects) {
		// What a plain NATS watcher does to see every event from now on:
		// ask Airlock to turn the live feed on for its subscription.
		out, err := s.nats(t, ctx, principal, "req", events.QueryLiveSubject, "")
		require.NoError(t, err, out)
		require.Contains(t, out, `{"live":true,"mode":"auto"}`)
	}
	return func(want ...string) string {
		t.Helper()
		assert.Eventually(t, func() bool {
			got := out.String()
			for _, w := range want {
				if !strings.Contains(got, w) {
					return false
				}
			}
			return true
		}, 30*time.Second, 20*time.Millisecond, "nats sub %s as %s", subject, principal)
		stop()
		return out.String()
	}
}

// TestNATSCLI drives the real nats CLI against airlock serve: the stream
// report lists Airlock's streams with their messages, a subscription to
// airlock.v1.> shows the CloudEvent headers of a request and its op's
// events, and micro ping and info find the query service.
func TestNATSCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the nats CLI")
	}
	_, err := natsCLI() // may take minutes the first time on a machine
	require.NoError(t, err)
	s := startServer(t, t.TempDir(), freePort(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A subscription running while one op goes through: the request and
	// its two op events, started (the gate's, with the decision: ADR
	// 0025) and completed, each with its CloudEvents headers; then each op
	// event again as the stream republishes it once stored
	// (airlock.v1.live.>).
	wait := s.natsSub(t, ctx, authority.ServiceName, "airlock.v1.>", "airlock.v1.probe")
	stdout, stderr, code := s.run(t, "submit", "--ws", "team", "--agent", "agent", "--tool", "echo", "--args", `{"n":1}`, "--json")
	require.Equal(t, exitOK, code, stderr)
	var submitted struct {
		OpID string `json:"op_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &submitted), stdout)
	opID := submitted.OpID
	want := []string{
		`Received on "airlock.v1.req.team.agent"`,
		"ce-type: dev.airlock.tool.requested.v1",
		`Received on "airlock.v1.op.team.` + opID + `.echo.started"`,
		"ce-type: dev.airlock.op.started.v1",
		"ce-source: airlock/gate",
		"ce-subject: " + opID,
		"ce-specversion: 1.0",
		`"decision":{`,
		`.echo.completed"`,
		"ce-type: dev.airlock.op.completed.v1",
		`Received on "airlock.v1.live.op.team.` + opID + `.echo.completed"`,
		"Nats-Subject: airlock.v1.op.team." + opID + ".echo.completed",
	}
	got := wait(want...)
	for _, w := range want {
		assert.Contains(t, got, w)
	}

	out, err := s.nats(t, ctx, authority.ServiceName, "stream", "report")
	require.NoError(t, err, out)
	for _, stream := range []string{"AIRLOCK_REQUESTS", "AIRLOCK_OPS", "KV_airlock-audit"} {
		assert.Contains(t, out, stream)
	}
	// The ops stream holds the op's two events and the policy loaded at
	// start; the row says so.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "AIRLOCK_OPS") {
			cells := strings.FieldsFunc(line, func(r rune) bool { return r == '│' || r == '|' })
			require.GreaterOrEqual(t, len(cells), 5, line)
			assert.Equal(t, "3", strings.TrimSpace(cells[4]), "messages of AIRLOCK_OPS: %s", line)
		}
	}

	// Discovery works for every role: here the auditor's.
	out, err = s.nats(t, ctx, "auditor", "micro", "ping")
	require.NoError(t, err, out)
	assert.Contains(t, out, "airlock-query")
	out, err = s.nats(t, ctx, "auditor", "micro", "info", "airlock-query")
	require.NoError(t, err, out)
	for _, want := range []string{"Airlock op queries over the projection", "airlock.v1.q.op", "airlock.v1.q.ops", "airlock.v1.q.audit.proof"} {
		assert.Contains(t, out, want)
	}

	// An auditor watches op events live, as stored (never requests: their
	// args are not for it).
	wait = s.natsSub(t, ctx, "auditor", "airlock.v1.live.op.>", "airlock.v1.live.op.probe")
	_, stderr, code = s.run(t, "submit", "--ws", "team", "--agent", "agent", "--tool", "echo", "--args", `{"n":2}`)
	require.Equal(t, exitOK, code, stderr)
	got = wait("ce-type: dev.airlock.op.started.v1", "ce-type: dev.airlock.op.completed.v1", "Nats-Stream: AIRLOCK_OPS")
	assert.Contains(t, got, "ce-type: dev.airlock.op.completed.v1")
	assert.NotContains(t, got, "airlock.v1.req.")
	for _, refused := range []string{"airlock.v1.req.>", "airlock.v1.op.>"} {
		out, err = s.nats(t, ctx, "auditor", "sub", refused, "--count", "1", "--timeout", "2s")
		assert.Error(t, err, out)
		assert.Contains(t, out, "Permissions Violation", refused)
	}

	// A role without JetStream cannot read the stream report.
	out, err = s.nats(t, ctx, "agent", "stream", "report")
	assert.Error(t, err, out)
}
