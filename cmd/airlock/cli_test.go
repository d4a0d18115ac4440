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
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// run runs the airlock binary and returns stdout, stderr and the exit code.
func run(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

func TestCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	ledger := t.TempDir()
	srv := startServer(t, t.TempDir(), freePort(t), []string{"AIRLOCK_TEST_LEDGER=" + ledger}, "--workspace-mode", "vault=locked", "--workspace-mode", "broken=sideways")

	// A locked workspace runs read tools only.
	out, _, code := srv.run(t, "submit", "--ws", "vault", "--tool", "count", "--json")
	assert.Equal(t, 4, code, out)
	assert.Contains(t, out, `"error_code":"WORKSPACE_LOCKED"`)
	out, _, code = srv.run(t, "submit", "--ws", "vault", "--tool", "echo", "--json")
	assert.Equal(t, 0, code, out)
	// A mode that does not parse is locked.
	out, _, code = srv.run(t, "submit", "--ws", "broken", "--tool", "count", "--json")
	assert.Equal(t, 4, code, out)
	assert.Contains(t, out, `"error_code":"WORKSPACE_LOCKED"`)

	// completed: exit 0, one JSON object with op_id, state and result.
	out, _, code = srv.run(t, "submit", "--ws", "cli", "--tool", "echo", "--args", `{"hello":"world"}`, "--json")
	require.Equal(t, 0, code, out)
	var got struct {
		OpID   string          `json:"op_id"`
		State  string          `json:"state"`
		Result json.RawMessage `json:"result"`
		Code   string          `json:"error_code"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, "completed", got.State)
	assert.JSONEq(t, `{"hello":"world"}`, string(got.Result))
	assert.Regexp(t, `^op_[0-9a-f]{32}$`, got.OpID)
	completed := got.OpID

	// The same request again is the same op, still completed, not rerun.
	out, _, code = srv.run(t, "submit", "--ws", "cli", "--tool", "echo", "--args", `{ "hello" : "world" }`, "--json")
	require.Equal(t, 0, code)
	var retry struct {
		OpID         string          `json:"op_id"`
		Result       json.RawMessage `json:"result"`
		ResultDigest string          `json:"result_digest"`
		ResultBytes  int             `json:"result_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &retry))
	assert.Equal(t, completed, retry.OpID)
	// Airlock keeps the result for the agent: the retry gets it again,
	// checked against its digest.
	assert.JSONEq(t, `{"hello":"world"}`, string(retry.Result), out)
	assert.Equal(t, events.Digest([]byte(`{"hello":"world"}`)), retry.ResultDigest)
	assert.Equal(t, len(`{"hello":"world"}`), retry.ResultBytes)
	out, _, code = srv.run(t, "submit", "--ws", "cli", "--tool", "echo", "--args", `{"hello":"world"}`)
	require.Equal(t, 0, code)
	assert.Contains(t, out, `{"hello":"world"}`)
	out, _, code = srv.run(t, "ops", "get", completed)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, retry.ResultDigest+", 17 bytes, kept for agent until ")
	assert.NotContains(t, out, "world", "ops get shows the digest, never the result")

	// denied: exit 4 with the code.
	out, _, code = srv.run(t, "submit", "--ws", "cli", "--tool", "format_disk", "--json")
	assert.Equal(t, 4, code)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, "denied", got.State)
	assert.Equal(t, "CAPABILITY_DENIED", got.Code)

	// still pending when --wait runs out: exit 3.
	out, _, code = srv.run(t, "submit", "--ws", "cli", "--tool", "block", "--wait", "300ms", "--json")
	assert.Equal(t, 3, code, out)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	blocked := got.OpID
	require.NoError(t, os.WriteFile(filepath.Join(ledger, "release"), nil, 0o600))
	out, _, code = srv.run(t, "submit", "--ws", "cli", "--tool", "block", "--json")
	assert.Equal(t, 0, code, out)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, blocked, got.OpID)

	// usage errors: exit 2, nothing sent.
	for _, args := range [][]string{
		{"submit", "--tool", "echo"},
		{"submit", "--ws", "cli", "--tool", "echo", "--args", "{not json"},
		{"submit", "--ws", "CLI", "--tool", "echo"},
		{"submit", "--ws", "cli", "--tool", "echo", "--wait", "0s"},
		{"ops", "get", "not-an-op"},
		{"ops", "list", "--state", "sleeping"},
		{"ops", "result", "op_nope"},
		{"frobnicate"},
	} {
		_, stderr, code := srv.run(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
	}
	// serve refuses a live feed mode it does not know, and auto where it
	// cannot see the subscribers; usage errors before anything starts.
	for _, args := range [][]string{
		{"--live-feed", "sometimes"},
		{"--live-feed", "auto", "--nats-url", srv.url},
		{"--result-ttl", "721h"},
		{"--result-ttl", "1500ms"},
		{"--result-ttl", "-1s"},
		{"--result-retain-bytes", "0"},
		{"--result-retain-bytes", "-2"},
	} {
		_, stderr, code := run(t, append([]string{"serve", "--data", t.TempDir(), "--listen", freePort(t), "--monitor", ""}, args...)...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
		assert.Contains(t, stderr, args[0], args)
	}

	// Nothing listening: exit 1 and a JSON error, still one object.
	out, _, code = run(t, "submit", "--server=nats://"+freePort(t), "--ws", "cli", "--tool", "echo", "--json")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `"error_code":"UNAVAILABLE"`)
	out, _, code = srv.run(t, "submit", "--ws", "cli", "--tool", "echo", "--args", "[", "--json")
	assert.Equal(t, 2, code)
	assert.Contains(t, out, `"error_code":"INVALID_ARGS"`)

	// ops get and ops list read the projection.
	require.Eventually(t, func() bool {
		out, _, code = srv.run(t, "ops", "get", completed, "--json")
		return code == 0
	}, 10*time.Second, 50*time.Millisecond)
	var op struct {
		ID    string `json:"op_id"`
		State string `json:"state"`
		Tool  string `json:"tool"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &op))
	assert.Equal(t, completed, op.ID)
	assert.Equal(t, "completed", op.State)
	assert.Equal(t, "echo", op.Tool)

	out, _, code = srv.run(t, "ops", "list", "--state", "denied", "--json")
	require.Equal(t, 0, code)
	var list struct {
		Ops []struct {
			State string `json:"state"`
		} `json:"ops"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Ops, 3) // the locked and the broken workspace's writes, the unknown tool
	assert.Equal(t, "denied", list.Ops[0].State)

	out, _, code = srv.run(t, "ops", "list")
	require.Equal(t, 0, code)
	assert.Equal(t, 7, strings.Count(out, "\n"), out) // header and six ops

	_, stderr, code := srv.run(t, "ops", "get", "op_00000000000000000000000000000000")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "NOT_FOUND")

	// A clean shutdown on SIGTERM.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exit, err := srv.stop(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, exit, srv.stderr.String())
}

func TestServeRestartKeepsStateAndUpdatesStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir, addr := t.TempDir(), freePort(t)
	srv := startServer(t, dir, addr, nil)
	out, _, code := srv.run(t, "submit", "--ws", "keep", "--tool", "echo", "--args", `{"n":1}`, "--json")
	require.Equal(t, 0, code)
	var first struct {
		OpID string `json:"op_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &first))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exit, err := srv.stop(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, exit)

	// Same data dir, another dedupe window: the stream is updated, the op
	// is still there and still answers a retry.
	srv = startServer(t, dir, addr, nil, "--dedupe-window", "5m")
	nc := srv.connect(t, authority.ServiceName)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, streams.Requests)
	require.NoError(t, err)
	assert.Equal(t, 5*time.Minute, st.CachedInfo().Config.Duplicates)
	out, _, code = srv.run(t, "ops", "get", first.OpID, "--json")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `"state":"completed"`)
	out, _, code = srv.run(t, "submit", "--ws", "keep", "--tool", "echo", "--args", `{"n":1}`, "--json")
	require.Equal(t, 0, code)
	assert.Contains(t, out, first.OpID)
}

// A second airlock serve with --nats-url runs its parts against the first
// one's NATS, on the same code path: both share the streams and the work.
func TestServeAgainstExternalNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	first := startServer(t, t.TempDir(), freePort(t), nil)
	// The second process shares the first one's principals and audit key,
	// as processes against one external server do.
	dir := t.TempDir()
	copyCreds(t, first.dir, dir)
	second := startServer(t, dir, freePort(t), nil, "--nats-url", first.url)
	assert.Equal(t, first.url, second.url, "the second prints the NATS it uses")
	for i := range 10 {
		out, _, code := first.run(t, "submit", "--ws", "ext", "--tool", "echo", "--args", fmt.Sprintf(`{"i":%d}`, i), "--json")
		require.Equal(t, 0, code, out)
		assert.Contains(t, out, `"state":"completed"`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exit, err := second.stop(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, exit, second.stderr.String())
}

// Args too big for a command line (one argument may be at most 128 KiB
// on Linux) come from a file or stdin.
func TestSubmitArgsFile(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	srv := startServer(t, t.TempDir(), freePort(t), nil)
	args := `{"text":"` + strings.Repeat("a", 200<<10) + `"}`
	file := filepath.Join(t.TempDir(), "args.json")
	require.NoError(t, os.WriteFile(file, []byte(args), 0o600))
	out, errOut, code := srv.run(t, "submit", "--ws", "cli", "--tool", "echo", "--args-file", file, "--json")
	require.Equal(t, 0, code, out+errOut)
	var first struct {
		OpID  string `json:"op_id"`
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &first))
	assert.Equal(t, "completed", first.State)
	req := events.Request{Workspace: "cli", Agent: "agent", Tool: "echo", Args: json.RawMessage(args)}
	require.NoError(t, req.Validate())
	_, want := req.Identity()
	assert.Equal(t, want, first.OpID, "the file's args, as they are")

	// From stdin: the same args, so the same op.
	cmd := exec.Command(binary, "submit", "--ws", "cli", "--tool", "echo", "--args-file", "-", "--json", "--server="+srv.url, "--data="+srv.dir)
	cmd.Stdin = strings.NewReader(args)
	b, err := cmd.Output()
	require.NoError(t, err, string(b))
	assert.Contains(t, string(b), first.OpID)

	// Both flags, a missing file, a file over the limit: usage errors.
	_, errOut, code = srv.run(t, "submit", "--ws", "cli", "--tool", "echo", "--args-file", file, "--args", "{}")
	assert.Equal(t, exitUsage, code, errOut)
	_, errOut, code = srv.run(t, "submit", "--ws", "cli", "--tool", "echo", "--args-file", file+".none")
	assert.Equal(t, exitUsage, code, errOut)
	assert.Contains(t, errOut, "--args-file")
	big := filepath.Join(t.TempDir(), "big.json")
	require.NoError(t, os.WriteFile(big, []byte(`{"text":"`+strings.Repeat("a", events.MaxRequestBytes)+`"}`), 0o600))
	_, errOut, code = srv.run(t, "submit", "--ws", "cli", "--tool", "echo", "--args-file", big)
	assert.Equal(t, exitUsage, code, errOut)
	assert.Contains(t, errOut, "ARGS_TOO_LARGE")
}
