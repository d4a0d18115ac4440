package main

import (
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
	"github.com/airlock-dev/airlock/internal/seal"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// resultsPolicy holds exec in workspace "review" (root root), runs it at
// once in "auto", and keeps results in "brief" for ttl only.
func resultsPolicy(t *testing.T, root, ttl string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	body := fmt.Sprintf("tools: {exec: exec, echo: read}\ndefault_mode: auto\nworkspaces:\n"+
		"  review: {mode: confirm, root: %[1]q}\n  auto: {mode: auto, root: %[1]q}\n"+
		"  brief: {mode: auto, root: %[1]q, results: {ttl: %[2]s}}\n"+
		"  once: {mode: auto, root: %[1]q, results: {erase_after_delivery: true}}\n", root, ttl)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

type submitted struct {
	OpID         string `json:"op_id"`
	State        string `json:"state"`
	HoldID       string `json:"hold_id"`
	Result       json.RawMessage
	ResultDigest string `json:"result_digest"`
	ResultCode   string `json:"result_code"`
	ErrorCode    string `json:"error_code"`
	Error        string `json:"error"`
}

func decode(t *testing.T, out string) submitted {
	t.Helper()
	var s submitted
	require.NoError(t, json.Unmarshal([]byte(out), &s), out)
	return s
}

// The case: a held exec, granted, runs once; the agent's retry of
// the same submit gets the full stdout, so does ops result, and nobody but
// the requesting agent gets more than the digest.
func TestHeldExecResultReachesTheAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir, root := t.TempDir(), t.TempDir()
	_, _, code := run(t, "creds", "add", "other", "--role", "agent", "--data", dir)
	require.Equal(t, 0, code)
	srv := startServer(t, dir, freePort(t), nil, "--policy", resultsPolicy(t, root, "24h"))

	marker := filepath.Join(root, "ran")
	secret := "stdout-" + strings.Repeat("s3cr3t", 8)
	args, _ := json.Marshal(map[string]any{"argv": []string{"/bin/sh", "-c", "echo run >> " + marker + "; echo " + secret}})
	out, _, code := srv.run(t, "submit", "--ws", "review", "--tool", "exec", "--args", string(args), "--json")
	require.Equal(t, 3, code, out)
	held := decode(t, out)
	require.Equal(t, "APPROVAL_REQUIRED", held.ErrorCode)

	out, errOut, code := srv.run(t, "holds", "grant", held.HoldID, "--reason", "fine")
	require.Equal(t, 0, code, out+errOut)
	require.Eventually(t, func() bool {
		out, _, _ := srv.run(t, "ops", "get", held.OpID, "--json")
		return strings.Contains(out, `"state":"completed"`)
	}, 15*time.Second, 50*time.Millisecond)

	// The same submit again: the full stdout, exit 0.
	out, errOut, code = srv.run(t, "submit", "--ws", "review", "--tool", "exec", "--args", string(args))
	require.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, held.OpID+" completed")
	assert.Contains(t, out, secret)
	out, _, code = srv.run(t, "submit", "--ws", "review", "--tool", "exec", "--args", string(args), "--json")
	require.Equal(t, 0, code, out)
	again := decode(t, out)
	assert.Contains(t, string(again.Result), secret)

	// Every other principal sees what goes to inboxes: none of it is
	// the result, sealed or not.
	var seen []string
	var seenMu sync.Mutex
	for _, who := range []string{"auditor", "approver", "other"} {
		nc := srv.connect(t, who)
		_, err := nc.Subscribe("_INBOX.>", func(m *nats.Msg) {
			seenMu.Lock()
			defer seenMu.Unlock()
			seen = append(seen, string(m.Data))
		})
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
	}

	// ops result, as the agent: the result itself.
	out, errOut, code = srv.run(t, "ops", "result", held.OpID)
	require.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, secret)
	assert.Contains(t, out, `"exit_code":0`)

	seenMu.Lock()
	require.NotEmpty(t, seen, "the inbox answers were seen")
	for _, m := range seen {
		assert.NotContains(t, m, "sealed_result")
		assert.NotContains(t, m, secret)
	}
	seenMu.Unlock()

	// Everyone else: the digest, never the bytes.
	for _, who := range []string{"other", "approver", "operator", "auditor"} {
		creds := filepath.Join(dir, "creds", who+".creds")
		out, errOut, code := srv.run(t, "ops", "result", held.OpID, "--creds", creds)
		assert.Equal(t, 1, code, who+": "+out+errOut)
		assert.Contains(t, errOut, "NOT_REQUESTER", who)
		assert.Contains(t, errOut, again.ResultDigest, who)
		assert.NotContains(t, out+errOut, secret, who)
		// Asking in the agent's name is refused by the server.
		out, errOut, code = srv.run(t, "ops", "result", held.OpID, "--creds", creds, "--agent", "agent")
		assert.Equal(t, 1, code, who)
		assert.Contains(t, errOut, "PERMISSION_DENIED", who)
		assert.NotContains(t, out+errOut, secret, who)
		out, _, _ = srv.run(t, "ops", "get", held.OpID, "--json", "--creds", creds)
		assert.NotContains(t, out, secret, who)
	}

	// An auditor checks a result someone kept against the op's proof.
	kept := filepath.Join(t.TempDir(), "result.json")
	out, _, code = srv.run(t, "ops", "result", held.OpID)
	require.Equal(t, 0, code)
	require.NoError(t, os.WriteFile(kept, []byte(out), 0o600))
	proof := filepath.Join(t.TempDir(), "proof")
	out, errOut, code = srv.run(t, "audit", "prove", held.OpID, "-o", proof, "--remote", "--creds", filepath.Join(dir, "creds", "auditor.creds"))
	require.Equal(t, 0, code, out+errOut)
	out, errOut, code = srv.run(t, "audit", "check-proof", proof, "--result", kept)
	assert.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, "matches the op's completed event")
	forged := filepath.Join(t.TempDir(), "forged.json")
	require.NoError(t, os.WriteFile(forged, []byte(strings.Replace(string(must(os.ReadFile(kept))), "s3cr3t", "0ther", 1)), 0o600))
	out, errOut, code = srv.run(t, "audit", "check-proof", proof, "--result", forged)
	assert.Equal(t, exitAudit, code, out+errOut)
	assert.Contains(t, errOut, "not the op's result")

	// It ran once.
	b, err := os.ReadFile(marker)
	require.NoError(t, err)
	assert.Equal(t, "run\n", string(b))
}

// A held submit --wait waits through the grant and prints the result.
func TestHeldSubmitWaitsThroughTheGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir, root := t.TempDir(), t.TempDir()
	srv := startServer(t, dir, freePort(t), nil, "--policy", resultsPolicy(t, root, "24h"))
	args := `{"argv":["/bin/echo","through the hold"]}`
	type res struct {
		out, errOut string
		code        int
	}
	done := make(chan res, 1)
	go func() {
		out, errOut, code := srv.run(t, "submit", "--ws", "review", "--tool", "exec", "--args", args, "--wait", "60s")
		done <- res{out, errOut, code}
	}()
	var holdID string
	require.Eventually(t, func() bool {
		out, _, code := srv.run(t, "holds", "list", "--json")
		if code != 0 {
			return false
		}
		var hs []struct {
			HoldID string `json:"hold_id"`
		}
		if json.Unmarshal([]byte(out), &hs) != nil || len(hs) == 0 {
			return false
		}
		holdID = hs[0].HoldID
		return true
	}, 15*time.Second, 100*time.Millisecond)
	out, errOut, code := srv.run(t, "holds", "grant", holdID, "--reason", "ok")
	require.Equal(t, 0, code, out+errOut)
	select {
	case r := <-done:
		require.Equal(t, 0, r.code, r.out+r.errOut)
		assert.Contains(t, r.out, "completed")
		assert.Contains(t, r.out, "through the hold")
	case <-time.After(60 * time.Second):
		t.Fatal("submit --wait did not return after the grant")
	}
}

// A short retention erases the result: the fetch says RESULT_EXPIRED with
// the digest, and the log records the erasure.
func TestResultRetentionEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir, root := t.TempDir(), t.TempDir()
	srv := startServer(t, dir, freePort(t), nil, "--policy", resultsPolicy(t, root, "2s"))
	out, errOut, code := srv.run(t, "submit", "--ws", "brief", "--tool", "exec", "--args", `{"argv":["/bin/echo","short-lived"]}`, "--json")
	require.Equal(t, 0, code, out+errOut)
	s := decode(t, out)
	assert.Contains(t, string(s.Result), "short-lived")
	out, _, code = srv.run(t, "ops", "result", s.OpID)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "short-lived")

	require.Eventually(t, func() bool {
		out, _, _ := srv.run(t, "ops", "get", s.OpID, "--json")
		return strings.Contains(out, `"result_erased":"expired"`)
	}, 20*time.Second, 200*time.Millisecond)
	out, errOut, code = srv.run(t, "ops", "result", s.OpID)
	assert.Equal(t, 4, code, out+errOut)
	assert.Contains(t, errOut, "RESULT_EXPIRED")
	assert.Contains(t, errOut, s.ResultDigest)
	// The retry says so too, and exits 0: the op completed.
	out, errOut, code = srv.run(t, "submit", "--ws", "brief", "--tool", "exec", "--args", `{"argv":["/bin/echo","short-lived"]}`)
	assert.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, "result not available: RESULT_EXPIRED")
	assert.NotContains(t, out, "short-lived")

	// Erase on delivery: the first fetch has it, the next does not.
	out, errOut, code = srv.run(t, "submit", "--ws", "once", "--tool", "exec", "--args", `{"argv":["/bin/echo","read-once"]}`, "--json")
	require.Equal(t, 0, code, out+errOut)
	s = decode(t, out)
	assert.Contains(t, string(s.Result), "read-once")
	require.Eventually(t, func() bool {
		out, _, _ := srv.run(t, "ops", "get", s.OpID, "--json")
		return strings.Contains(out, `"result_erased":"delivered"`)
	}, 10*time.Second, 100*time.Millisecond)
	out, errOut, code = srv.run(t, "ops", "result", s.OpID)
	assert.Equal(t, 4, code, out+errOut)
	assert.Contains(t, errOut, "RESULT_EXPIRED")
}

// scanFor fails the test if any file under dir holds secret; files that
// vanish during the walk (a store compacting) are skipped.
func scanFor(t *testing.T, dir, secret, when string) {
	t.Helper()
	files := 0
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return nil
		}
		require.NoError(t, err)
		files++
		assert.NotContains(t, string(b), secret, "%s: %s holds the result's plaintext", when, path)
		return nil
	}))
	require.Positive(t, files)
}

// A client killed after publishing never sees the runner's reply; a new
// client (another process) retrying the request gets the result. No byte
// of the result is in the data dir at any point, before or after its
// retention ends.
func TestLostReplyResultOnRetry(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir, root := t.TempDir(), t.TempDir()
	srv := startServer(t, dir, freePort(t), nil, "--policy", resultsPolicy(t, root, "3s"))
	// The output is made by the shell: the args never hold it. The op
	// runs for 4s, long enough for a loaded machine to see it executing.
	const secret = "res2ult-plaintext-marker"
	args := `{"argv":["/bin/sh","-c","sleep 4; echo res$((1+1))ult-plaintext-marker"]}`

	first := exec.Command(binary, "submit", "--ws", "brief", "--tool", "exec", "--args", args, "--wait", "30s", "--server="+srv.url, "--data="+srv.dir)
	require.NoError(t, first.Start())
	req := events.Request{Workspace: "brief", Agent: "agent", Tool: "exec", Args: json.RawMessage(args)}
	_, opID := req.Identity()
	require.Eventually(t, func() bool {
		out, _, _ := srv.run(t, "ops", "get", opID, "--json")
		return strings.Contains(out, `"state":"executing"`)
	}, 15*time.Second, 20*time.Millisecond)
	require.NoError(t, first.Process.Kill())
	_ = first.Wait()

	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		scanFor(t, dir, secret, "while the op runs and completes")
		time.Sleep(100 * time.Millisecond)
	}
	out, errOut, code := srv.run(t, "submit", "--ws", "brief", "--tool", "exec", "--args", args, "--json")
	require.Equal(t, 0, code, out+errOut)
	s := decode(t, out)
	assert.Equal(t, opID, s.OpID)
	assert.Contains(t, string(s.Result), secret)
	scanFor(t, dir, secret, "while the result is kept")

	require.Eventually(t, func() bool {
		out, _, _ := srv.run(t, "ops", "get", s.OpID, "--json")
		return strings.Contains(out, `"result_erased":"expired"`)
	}, 20*time.Second, 200*time.Millisecond)
	scanFor(t, dir, secret, "after the retention ended")
	code, err := srv.stop(context.Background())
	require.NoError(t, err)
	require.Equal(t, 0, code)
	scanFor(t, dir, secret, "after serve stopped")
}

// An agent whose seed is not in the data dir has results that no key the
// data dir holds opens, Airlock's own included; its own seed does, and
// the CLI with its creds file gets the result.
func TestDataDirCannotOpenAnExternalAgentsResult(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir, root, elsewhere := t.TempDir(), t.TempDir(), t.TempDir()
	agentCreds := filepath.Join(elsewhere, "remote.creds")
	out, errOut, code := run(t, "creds", "add", "remote", "--role", "agent", "--out", agentCreds, "--data", dir)
	require.Equal(t, 0, code, out+errOut)
	out, _, code = run(t, "creds", "list", "--data", dir)
	require.Equal(t, 0, code)
	assert.Regexp(t, `remote\s+agent\s+U\S+\s+elsewhere`, out)
	srv := startServer(t, dir, freePort(t), nil, "--policy", resultsPolicy(t, root, "24h"))

	args := `{"argv":["/bin/sh","-c","echo only$((0+1))for-remote"]}`
	out, errOut, code = srv.run(t, "submit", "--ws", "auto", "--tool", "exec", "--args", args, "--json", "--creds", agentCreds)
	require.Equal(t, 0, code, out+errOut)
	s := decode(t, out)
	require.Contains(t, string(s.Result), "only1for-remote")
	out, errOut, code = srv.run(t, "ops", "result", s.OpID, "--creds", agentCreds)
	require.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, "only1for-remote")

	// The stored message, as Airlock's own principal reads it.
	c, err := producers.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	op, err := c.Op(context.Background(), s.OpID)
	require.NoError(t, err)
	js, err := jetstream.New(srv.connect(t, authority.ServiceName))
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), streams.Results)
	require.NoError(t, err)
	require.NotZero(t, op.ResultSeq)
	m, err := st.GetMsg(context.Background(), op.ResultSeq)
	require.NoError(t, err)
	assert.Equal(t, events.ResultSubject("auto"), m.Subject)
	assert.Equal(t, s.OpID, m.Header.Get(events.HeaderResultOp))
	assert.NotContains(t, string(m.Data), "only1for-remote")

	opens := func(credsPath string) bool {
		seed, err := authority.Seed(credsPath)
		require.NoError(t, err)
		priv, err := seal.PrivateKey(seed)
		require.NoError(t, err)
		plain, err := seal.NewOpener(priv).Open(s.OpID, m.Data)
		return err == nil && strings.Contains(string(plain), "only1for-remote")
	}
	seeds, err := filepath.Glob(filepath.Join(dir, "creds", "*.creds"))
	require.NoError(t, err)
	require.Len(t, seeds, 5, "the default principals' seeds")
	for _, p := range seeds {
		assert.False(t, opens(p), "%s opens the result", filepath.Base(p))
	}
	assert.True(t, opens(agentCreds), "the agent's own seed opens it")
	scanFor(t, dir, "only1for-remote", "with the result kept")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
