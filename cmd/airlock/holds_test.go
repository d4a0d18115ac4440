package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testPolicy = `# confirm in review; one hold rule
tools:
  echo: read
  count: write
default_mode: auto
workspaces:
  review:
    mode: confirm
rules:
  - name: hold-big
    when: 'has(args.n) && args.n > 100'
    action: hold
    reason: big batch
hold_ttl: 10m
`

func TestHoldsCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(testPolicy), 0o600))
	out, _, code := run(t, "policy", "check", pol)
	require.Equal(t, 0, code, out)
	hash := strings.TrimSpace(out)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, hash)

	ledger := t.TempDir()
	srv := startServer(t, t.TempDir(), freePort(t), []string{"AIRLOCK_TEST_LEDGER=" + ledger}, "--policy", pol)
	for _, role := range []string{"airlock", "agent", "approver", "operator", "auditor"} {
		fi, err := os.Stat(filepath.Join(srv.dir, "creds", role+".creds"))
		require.NoError(t, err, role)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), role)
	}

	// Held: exit 3, APPROVAL_REQUIRED and the hold id; nothing ran.
	out, _, code = srv.run(t, "submit", "--ws", "review", "--tool", "count", "--args", `{"f":1}`, "--json")
	require.Equal(t, 3, code, out)
	var held struct {
		OpID       string `json:"op_id"`
		State      string `json:"state"`
		Code       string `json:"error_code"`
		HoldID     string `json:"hold_id"`
		ArgsDigest string `json:"args_digest"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &held))
	assert.Equal(t, "held", held.State)
	assert.Equal(t, "APPROVAL_REQUIRED", held.Code)
	assert.Equal(t, events.HoldID(held.OpID), held.HoldID)
	_, err := os.Stat(filepath.Join(ledger, held.OpID))
	assert.True(t, os.IsNotExist(err), "a held op does not run")

	// holds list and show, as the approver.
	require.Eventually(t, func() bool {
		out, _, code = srv.run(t, "holds", "list", "--ws", "review", "--json")
		return code == 0 && strings.Contains(out, held.HoldID)
	}, 10*time.Second, 50*time.Millisecond)
	out, _, code = srv.run(t, "holds", "show", held.HoldID)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, held.ArgsDigest)
	assert.Contains(t, out, hash)

	// A grant naming other args is refused; the right one runs the op once.
	out, _, code = srv.run(t, "holds", "grant", held.HoldID, "--reason", "ok", "--digest", "sha256:"+strings.Repeat("0", 64), "--json")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "GRANT_DIGEST_MISMATCH")
	out, _, code = srv.run(t, "holds", "grant", held.HoldID, "--reason", "reviewed")
	require.Equal(t, 0, code, out)
	require.Eventually(t, func() bool {
		out, _, code = srv.run(t, "ops", "get", held.OpID, "--json")
		return code == 0 && strings.Contains(out, `"state":"completed"`)
	}, 10*time.Second, 50*time.Millisecond)
	assert.Contains(t, out, `"approver":"approver"`)
	out, _, code = srv.run(t, "submit", "--ws", "review", "--tool", "count", "--args", `{"f":1}`, "--json")
	assert.Equal(t, 0, code, out)

	// Deny: the op ends denied; exit 4 for its submitter.
	out, _, code = srv.run(t, "submit", "--ws", "dev", "--tool", "count", "--args", `{"n":500}`, "--json")
	require.Equal(t, 3, code, out)
	require.NoError(t, json.Unmarshal([]byte(out), &held))
	require.Eventually(t, func() bool {
		_, _, code = srv.run(t, "holds", "show", held.HoldID)
		return code == 0
	}, 10*time.Second, 50*time.Millisecond)
	out, _, code = srv.run(t, "holds", "deny", held.HoldID, "--reason", "too big")
	require.Equal(t, 0, code, out)
	out, _, code = srv.run(t, "submit", "--ws", "dev", "--tool", "count", "--args", `{"n":500}`, "--json")
	assert.Equal(t, 4, code, out)
	assert.Contains(t, out, "APPROVAL_DENIED")

	// An operator's lockdown; the agent's credential may not set modes.
	out, _, code = srv.run(t, "ctl", "mode", "dev", "locked", "--reason", "incident", "--json")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `"actor":"operator"`)
	out, _, code = srv.run(t, "submit", "--ws", "dev", "--tool", "count", "--args", `{"n":1}`, "--json")
	assert.Equal(t, 4, code, out)
	assert.Contains(t, out, "WORKSPACE_LOCKED")
	_, stderr, code := srv.run(t, "ctl", "mode", "dev", "auto", "--reason", "sneaky", "--creds", filepath.Join(srv.dir, "creds", "agent.creds"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "PERMISSION_DENIED")

	// SIGHUP reloads the policy file and records the new hash; a broken
	// file is refused and the old policy stays.
	require.NoError(t, os.WriteFile(pol, []byte(strings.Replace(testPolicy, "hold_ttl: 10m", "hold_ttl: 20m", 1)), 0o600))
	out, _, code = run(t, "policy", "check", pol)
	require.Equal(t, 0, code)
	newHash := strings.TrimSpace(out)
	require.NotEqual(t, hash, newHash)
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGHUP))
	js, err := jetstream.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := js.Stream(context.Background(), streams.Ops)
		if err != nil {
			return false
		}
		m, err := st.GetLastMsgForSubject(context.Background(), events.PolicySubject)
		return err == nil && strings.Contains(string(m.Data), newHash) && strings.Contains(string(m.Data), hash)
	}, 10*time.Second, 50*time.Millisecond)

	// A clean shutdown.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exit, err := srv.stop(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, exit, srv.stderr.String())
}

func TestBadPolicyRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("rules:\n  - name: broken-rule\n    when: 'tool == '\n    action: deny\n"), 0o600))
	_, stderr, code := run(t, "policy", "check", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "broken-rule")
	assert.Regexp(t, `\d+:\d+`, stderr, "the error names the position")

	unknown := filepath.Join(dir, "unknown.yaml")
	require.NoError(t, os.WriteFile(unknown, []byte("tools: {echo: read}\nworkspacez: {}\n"), 0o600))
	_, stderr, code = run(t, "policy", "check", unknown)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "workspacez")

	// serve refuses to start on either, naming the problem.
	for _, f := range []string{bad, unknown} {
		cmd := exec.Command(binary, "serve", "--data", t.TempDir(), "--listen", freePort(t), "--monitor", "", "--policy", f)
		out, err := cmd.CombinedOutput()
		require.Error(t, err)
		assert.NotEqual(t, 0, cmd.ProcessState.ExitCode())
		assert.Regexp(t, `broken-rule|workspacez`, string(out))
	}
}

func TestCredsCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir := t.TempDir()
	out, _, code := run(t, "creds", "add", "alice", "--role", "approver", "--data", dir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "alice (approver) U")
	fi, err := os.Stat(filepath.Join(dir, "creds", "alice.creds"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	out, _, code = run(t, "creds", "list", "--data", dir)
	require.Equal(t, 0, code)
	for _, name := range []string{"airlock", "agent", "approver", "operator", "auditor", "alice"} {
		assert.Contains(t, out, name)
	}
	_, _, code = run(t, "creds", "add", "alice", "--role", "approver", "--data", dir)
	assert.Equal(t, 1, code, "a name is taken once")
	_, _, code = run(t, "creds", "add", "bob", "--role", "root", "--data", dir)
	assert.Equal(t, 2, code)

	// alice resolves under her own name: serve admits her and records her.
	srv := startServer(t, dir, freePort(t), nil, "--workspace-mode", "review=confirm", "--tool-class", "echo=write")
	_, err = os.Stat(filepath.Join(dir, "nats-auth.conf"))
	require.NoError(t, err, "serve writes the auth config for external servers")
	out, _, code = srv.run(t, "submit", "--ws", "review", "--tool", "echo", "--args", `{"a":1}`, "--json")
	require.Equal(t, 3, code, out)
	var held struct {
		OpID   string `json:"op_id"`
		HoldID string `json:"hold_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &held))
	require.Eventually(t, func() bool {
		out, _, code = srv.run(t, "holds", "grant", held.HoldID, "--reason", "ok", "--creds", filepath.Join(dir, "creds", "alice.creds"))
		return code == 0
	}, 10*time.Second, 100*time.Millisecond, out)
	require.Eventually(t, func() bool {
		out, _, code = srv.run(t, "ops", "get", held.OpID, "--json")
		return code == 0 && strings.Contains(out, `"state":"completed"`)
	}, 10*time.Second, 50*time.Millisecond)
	assert.Contains(t, out, `"approver":"alice"`)
}

// A pending hold survives a crash of serve (SIGKILL): the retry after the
// restart gets the same hold, the hold is still listed, and its grant runs
// the op once.
func TestCrashHoldSurvivesServe(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	dir, ledger, addr := t.TempDir(), t.TempDir(), freePort(t)
	env := []string{"AIRLOCK_TEST_LEDGER=" + ledger}
	srv := startServer(t, dir, addr, env, "--workspace-mode", "review=confirm")
	submit := func() (string, string) {
		out, _, code := srv.run(t, "submit", "--ws", "review", "--tool", "count", "--args", `{"survive":true}`, "--json")
		require.Equal(t, 3, code, out)
		var held struct {
			OpID   string `json:"op_id"`
			HoldID string `json:"hold_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &held))
		return held.OpID, held.HoldID
	}
	opID, holdID := submit()
	srv.kill()

	srv = startServer(t, dir, addr, env, "--workspace-mode", "review=confirm")
	op2, hold2 := submit()
	assert.Equal(t, opID, op2)
	assert.Equal(t, holdID, hold2, "the same hold after the crash")
	var holds []struct {
		HoldID string `json:"hold_id"`
	}
	require.Eventually(t, func() bool {
		out, _, code := srv.run(t, "holds", "list", "--json")
		return code == 0 && json.Unmarshal([]byte(out), &holds) == nil && len(holds) == 1
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, holdID, holds[0].HoldID)
	out, _, code := srv.run(t, "holds", "grant", holdID, "--reason", "after the crash")
	require.Equal(t, 0, code, out)
	require.Eventually(t, func() bool {
		out, _, code = srv.run(t, "ops", "get", opID, "--json")
		return code == 0 && strings.Contains(out, `"state":"completed"`)
	}, 10*time.Second, 50*time.Millisecond)
	entries, err := os.ReadDir(ledger)
	require.NoError(t, err)
	ran := 0
	for _, e := range entries {
		if e.Name() == opID {
			ran++
		}
		assert.NotEqual(t, "DOUBLE", e.Name())
	}
	assert.Equal(t, 1, ran)
}

// An approver may grant a hold the moment its submitter is told of it:
// the answer of the process asked about the hold waits for its
// projection to hold what the stream stored. Here the projector pauses
// at every commit, so it trails the stream by more than half a second.
func TestHoldGrantedTheMomentItIsHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	ledger := t.TempDir()
	env := []string{"AIRLOCK_TEST_LEDGER=" + ledger, "AIRLOCK_FAILPOINT=audit-before-commit=pause-each:600ms"}
	srv := startServer(t, t.TempDir(), freePort(t), env, "--workspace-mode", "review=confirm")
	out, _, code := srv.run(t, "submit", "--ws", "review", "--tool", "count", "--args", `{"at":"once"}`, "--json")
	require.Equal(t, 3, code, out)
	var held struct {
		OpID   string `json:"op_id"`
		HoldID string `json:"hold_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &held))
	out, stderr, code := srv.run(t, "holds", "grant", held.HoldID, "--reason", "at once")
	require.Equal(t, 0, code, "%s%s\n%s", out, stderr, srv.stderr.String())
	require.Eventually(t, func() bool {
		out, _, code = srv.run(t, "ops", "get", held.OpID, "--json")
		return code == 0 && strings.Contains(out, `"state":"completed"`)
	}, 20*time.Second, 100*time.Millisecond)
	entries, err := os.ReadDir(ledger)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, held.OpID, entries[0].Name())

	// A hold no op has is refused once the projection has caught up,
	// within the query's bound.
	began := time.Now()
	_, stderr, code = srv.run(t, "holds", "show", events.HoldID("op_"+strings.Repeat("7", 32)))
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "HOLD_NOT_FOUND")
	assert.Less(t, time.Since(began), projector.CaughtUpWait+3*time.Second)
}
