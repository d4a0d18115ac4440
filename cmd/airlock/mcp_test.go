package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mcpRig is an airlock serve with the example upstream MCP server behind
// it (upstream "notes"), a workspace root, and the MCP configuration.
type mcpRig struct {
	srv                    *server
	root                   string
	config                 string
	out, calls, pid, descr string
	tokens                 [2]string // bearer tokens of agent and agent2
	metrics                string    // serve's /metrics URL
}

const mcpPolicy = `default_mode: auto
tools: {echo: read, exec: exec, apply_patch: write}
workspaces:
  w: {root: %q}
rules:
  - {name: hold-patch, when: 'tool == "apply_patch"', action: hold}
  - {name: hold-notes-append, when: 'tool == "notes__append"', action: hold}
  - {name: deny-rm, when: 'tool == "exec" && "rm" in args.argv', action: deny}
  - {name: allow-garbage, when: 'tool == "notes__garbage"', action: allow}
`

func newMCPRig(t testing.TB) *mcpRig {
	t.Helper()
	dir, up := t.TempDir(), t.TempDir()
	g := &mcpRig{root: t.TempDir(), out: filepath.Join(up, "out.log"), calls: filepath.Join(up, "calls.log"),
		pid: filepath.Join(up, "pid"), descr: filepath.Join(up, "description")}
	require.NoError(t, os.WriteFile(filepath.Join(g.root, "a.txt"), []byte("one\n"), 0o644))
	require.NoError(t, os.WriteFile(g.descr, []byte("Appends a line to the notes."), 0o644))
	_, errOut, code := run(t, "creds", "add", "agent2", "--role", "agent", "--data", dir)
	require.Equal(t, 0, code, errOut)
	pol := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(pol, fmt.Appendf(nil, mcpPolicy, g.root), 0o644))
	var lines []string
	for i, name := range []string{"agent", "agent2"} {
		g.tokens[i] = fmt.Sprintf("token-of-%s-%d", name, time.Now().UnixNano())
		sum := sha256.Sum256([]byte(g.tokens[i]))
		lines = append(lines, fmt.Sprintf("    - {sha256: %s, creds: %q, workspace: w}", hex.EncodeToString(sum[:]), filepath.Join(dir, "creds", name+".creds")))
	}
	g.config = filepath.Join(dir, "mcp.yaml")
	require.NoError(t, os.WriteFile(g.config, fmt.Appendf(nil, `upstreams:
  - name: notes
    command: [%q, --out, %q, --calls, %q, --pid-file, %q, --description-file, %q]
    timeout: 4s
    tools:
      - {match: peek, class: read}
      - {match: "*append", class: write}
      - {match: garbage, class: write}
gateway:
  workspace: w
  tokens:
%s
`, mcpExample, g.out, g.calls, g.pid, g.descr, strings.Join(lines, "\n")), 0o644))
	out, errOut, code := run(t, "mcp", "check", g.config)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "upstream notes:")
	maddr := freePort(t)
	g.metrics = "http://" + maddr + "/metrics"
	g.srv = startServer(t, dir, freePort(t), nil, "--policy", pol, "--mcp", g.config, "--claim-timeout", "3s", "--metrics", maddr)
	return g
}

// stdio launches airlock mcp over stdio as the data dir's agent, the way
// an MCP client's configuration does, and connects the SDK's client.
func (g *mcpRig) stdio(t testing.TB, holdWait time.Duration, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	cmd := exec.Command(binary, "mcp", "--server", g.srv.url, "--data", g.srv.dir, "--ws", "w", "--hold-wait", holdWait.String())
	stderr := &testenv.Buffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "v1"}, opts).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err, "stderr: %s", stderr)
	t.Cleanup(func() {
		_ = s.Close()
		if t.Failed() {
			t.Logf("airlock mcp's stderr:\n%s", stderr)
		}
	})
	return s
}

// call calls a tool with a minute's bound.
func call(t *testing.T, s *sdk.ClientSession, tool string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err, tool)
	return res
}

func structured(t *testing.T, res *sdk.CallToolResult) map[string]any {
	t.Helper()
	m, ok := res.StructuredContent.(map[string]any)
	require.True(t, ok, "structured content: %#v", res.StructuredContent)
	return m
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// grant grants a hold as the data dir's approver; the command waits for
// the op's outcome, and says it.
func grant(t *testing.T, g *mcpRig, holdID, digest string) (string, int) {
	t.Helper()
	out, errOut, code := g.srv.run(t, "holds", "grant", holdID, "--digest", digest, "--reason", "looked at it")
	return out + errOut, code
}

func granted(t *testing.T, g *mcpRig, holdID, digest string) {
	t.Helper()
	out, code := grant(t, g, holdID, digest)
	require.Equal(t, 0, code, out)
}

// The SDK's client over stdio: the tools, an allowed exec, a denied call,
// bad input, a held apply_patch granted while the call waits, and one
// whose wait ran out, granted later and applied once.
func TestMCPStdio(t *testing.T) {
	g := newMCPRig(t)
	s := g.stdio(t, 2*time.Second, nil)
	ctx := context.Background()

	lt, err := s.ListTools(ctx, nil)
	require.NoError(t, err)
	byName := map[string]*sdk.Tool{}
	for _, tl := range lt.Tools {
		byName[tl.Name] = tl
	}
	for _, name := range []string{"echo", "exec", "apply_patch", "notes__append", "notes__slow_append", "notes__peek", "notes__garbage"} {
		require.Contains(t, byName, name)
		assert.Contains(t, byName[name].Description, "approve", name)
	}
	schema, _ := json.Marshal(byName["exec"].InputSchema)
	assert.Contains(t, string(schema), `"argv"`)
	assert.True(t, byName["notes__peek"].Annotations.ReadOnlyHint)
	// The configuration says write; the tool's own annotation admits to
	// more, and raises it.
	assert.True(t, *byName["notes__garbage"].Annotations.DestructiveHint)
	assert.Contains(t, byName["notes__garbage"].Description, "class: destructive")
	assert.Contains(t, byName["notes__append"].Description, "Appends a line to the notes.")

	// Allowed: exec runs and its output comes back.
	res := call(t, s, "exec", map[string]any{"argv": []string{"/bin/echo", "hello from exec"}})
	require.False(t, res.IsError, text(res))
	assert.Contains(t, text(res), "hello from exec")
	sc := structured(t, res)
	assert.Equal(t, "completed", sc["state"])
	assert.Regexp(t, `^op_[0-9a-f]{32}$`, sc["op_id"])
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, sc["result_digest"])

	// Denied by a rule: its code, and nothing ran.
	res = call(t, s, "exec", map[string]any{"argv": []string{"rm", "-f", filepath.Join(g.root, "a.txt")}})
	assert.True(t, res.IsError)
	assert.Equal(t, "POLICY_DENIED", structured(t, res)["error_code"])
	assert.FileExists(t, filepath.Join(g.root, "a.txt"))

	// Bad input: args that fail the schema, and an unknown tool.
	res = call(t, s, "exec", map[string]any{"argv": "not a list"})
	assert.True(t, res.IsError)
	assert.Equal(t, "INVALID_ARGS", structured(t, res)["error_code"])
	_, err = s.CallTool(ctx, &sdk.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
	var rpc *jsonrpc.Error
	require.ErrorAs(t, err, &rpc)
	assert.Equal(t, int64(jsonrpc.CodeInvalidParams), rpc.Code)

	// Held, the wait runs out: APPROVAL_REQUIRED with the hold; the same
	// call again is the same hold.
	patch := map[string]any{"patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+two\n"}
	res = call(t, s, "apply_patch", patch)
	require.True(t, res.IsError, text(res))
	held := structured(t, res)
	assert.Equal(t, "APPROVAL_REQUIRED", held["error_code"])
	require.NotEmpty(t, held["hold_id"])
	assert.NotEmpty(t, held["expires_at"])
	assert.Contains(t, text(res), "call this tool again with the same arguments")
	again := structured(t, call(t, s, "apply_patch", patch))
	assert.Equal(t, held["hold_id"], again["hold_id"])
	assert.Equal(t, held["op_id"], again["op_id"])
	// Granted: the same call returns the result, and the patch is
	// applied once, however often it is called.
	granted(t, g, held["hold_id"].(string), held["args_digest"].(string))
	for range 2 {
		res = call(t, s, "apply_patch", patch)
		require.False(t, res.IsError, text(res))
		assert.Equal(t, held["op_id"], structured(t, res)["op_id"])
	}
	b, err := os.ReadFile(filepath.Join(g.root, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo\n", string(b))

	// Granted while the call waits: the result comes back in the same
	// call, with progress notifications while it waited.
	progress := make(chan string, 100)
	w := g.stdio(t, time.Minute, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		progress <- r.Params.Message
	}})
	patch2 := map[string]any{"patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n one\n two\n+three\n"}
	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := w.CallTool(ctx, &sdk.CallToolParams{Name: "apply_patch", Arguments: patch2, Meta: sdk.Meta{"progressToken": "p1"}})
		if err != nil {
			res = &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	var msg string
	select {
	case msg = <-progress:
	case <-time.After(30 * time.Second):
		t.Fatal("no progress notification while the call waited")
	}
	assert.Contains(t, msg, "held for approval")
	hold := regexpFind(t, `hold (\S+)\)`, msg)
	out, errOut, code := g.srv.run(t, "holds", "show", hold, "--json")
	require.Equal(t, 0, code, errOut)
	var op events.Op
	require.NoError(t, json.Unmarshal([]byte(out), &op))
	granted(t, g, hold, op.ArgsDigest)
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the granted call did not return")
	}
	require.False(t, res.IsError, text(res))
	assert.Equal(t, "completed", structured(t, res)["state"])
	b, err = os.ReadFile(filepath.Join(g.root, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo\nthree\n", string(b))
}

func regexpFind(t *testing.T, pattern, s string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(s)
	require.Len(t, m, 2, "%q in %q", pattern, s)
	return m[1]
}

// An upstream MCP server behind Airlock: proxied calls run once; the
// upstream killed mid-call makes the op ambiguous and it is not sent
// again; an upstream that hangs or answers garbage is ambiguous too and
// the gateway goes on serving; a tool whose definition changed after a
// hold fails its op with nothing sent.
func TestMCPUpstream(t *testing.T) {
	g := newMCPRig(t)
	s := g.stdio(t, 2*time.Second, nil)

	res := call(t, s, "notes__slow_append", map[string]any{"line": "first", "delay_ms": 0})
	require.False(t, res.IsError, text(res))
	assert.Contains(t, text(res), "appended line 1")
	first := structured(t, res)
	assert.JSONEq(t, `{"lines":1}`, mustJSON(t, first["result"]))
	// The same call again is the same op: its kept result, not a call.
	res = call(t, s, "notes__slow_append", map[string]any{"line": "first", "delay_ms": 0})
	assert.Equal(t, first["op_id"], structured(t, res)["op_id"])
	assert.Contains(t, text(res), "appended line 1")
	assert.Equal(t, []string{"slow_append first"}, lines(t, g.calls))
	assert.Equal(t, []string{"first"}, lines(t, g.out))

	// Killed mid-call: the line went in, the answer never came.
	pidBefore := readPID(t, g.pid)
	res = call(t, s, "notes__slow_append", map[string]any{"line": "killed", "delay_ms": 60000})
	require.True(t, res.IsError)
	killedOp := structured(t, res)["op_id"].(string)
	require.Eventually(t, func() bool { return len(lines(t, g.calls)) == 2 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, syscall.Kill(pidBefore, syscall.SIGKILL))
	op := waitOpState(t, g.srv, killedOp)
	assert.Equal(t, events.StateAmbiguous, op.State)
	res = call(t, s, "notes__slow_append", map[string]any{"line": "killed", "delay_ms": 60000})
	assert.Equal(t, "EXECUTION_AMBIGUOUS", structured(t, res)["error_code"])
	assert.Contains(t, text(res), "never runs it again")

	// The next call starts the upstream again; the killed call is not
	// repeated.
	res = call(t, s, "notes__peek", map[string]any{})
	require.False(t, res.IsError, text(res))
	assert.NotEqual(t, pidBefore, readPID(t, g.pid))
	assert.Equal(t, []string{"slow_append first", "slow_append killed", "peek"}, trimAll(lines(t, g.calls)))

	// Hangs past the upstream's timeout (4s): ambiguous.
	res = call(t, s, "notes__slow_append", map[string]any{"line": "hung", "delay_ms": 20000})
	hung := structured(t, res)["op_id"].(string)
	assert.Equal(t, events.StateAmbiguous, waitOpState(t, g.srv, hung).State)
	// Answers garbage and exits: ambiguous, and the gateway still serves.
	res = call(t, s, "notes__garbage", map[string]any{})
	gop := structured(t, res)["op_id"].(string)
	assert.Equal(t, events.StateAmbiguous, waitOpState(t, g.srv, gop).State)
	res = call(t, s, "notes__peek", map[string]any{})
	require.False(t, res.IsError, text(res))
	m := scrape(t, g.metrics)
	assert.Contains(t, m, `airlock_mcp_upstream_call_duration_seconds_count{outcome="answered",tool="notes__slow_append"} 1`)
	assert.Contains(t, m, `airlock_mcp_upstream_call_duration_seconds_count{outcome="ambiguous",tool="notes__slow_append"} 2`)
	assert.Contains(t, m, `airlock_mcp_upstream_call_duration_seconds_count{outcome="ambiguous",tool="notes__garbage"} 1`)

	// A changed definition after the hold: OPERANDS_CHANGED, nothing
	// sent. Here the upstream is redeployed (killed, started again with
	// a new description) between the hold and the grant.
	res = call(t, s, "notes__append", map[string]any{"line": "after review"})
	held := structured(t, res)
	require.Equal(t, "APPROVAL_REQUIRED", held["error_code"], text(res))
	require.NoError(t, os.WriteFile(g.descr, []byte("Appends a line, and also mails it to everyone."), 0o644))
	require.NoError(t, syscall.Kill(readPID(t, g.pid), syscall.SIGKILL))
	callsBefore := len(lines(t, g.calls))
	// The grant is accepted; the op fails when the runner finds the
	// definition changed (the grant's own answer may come before that).
	out, _ := grant(t, g, held["hold_id"].(string), held["args_digest"].(string))
	require.Contains(t, out, "granted", "the grant itself is accepted")
	op = waitOpState(t, g.srv, held["op_id"].(string))
	assert.Equal(t, events.StateFailed, op.State)
	assert.Equal(t, events.CodeOperandsChanged, op.ErrorCode)
	res = call(t, s, "notes__append", map[string]any{"line": "after review"})
	assert.Equal(t, "OPERANDS_CHANGED", structured(t, res)["error_code"])
	assert.Len(t, lines(t, g.calls), callsBefore, "nothing was sent")

	// Asked again as a new request (the retry argument): a new hold.
	res = call(t, s, "notes__append", map[string]any{"line": "after review", "_airlock_retry": "2"})
	again := structured(t, res)
	assert.Equal(t, "APPROVAL_REQUIRED", again["error_code"], text(res))
	assert.NotEqual(t, held["hold_id"], again["hold_id"])
}

func trimAll(ss []string) []string {
	for i := range ss {
		ss[i] = strings.TrimSpace(ss[i])
	}
	return ss
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	}, 10*time.Second, 20*time.Millisecond)
	return pid
}

// Streamable HTTP: 401 without a token; each token is one agent, and two
// sessions of different agents neither see nor resume each other's
// holds or results.
func TestMCPHTTP(t *testing.T) {
	g := newMCPRig(t)
	addr := freePort(t)
	maddr := freePort(t)
	cmd := exec.Command(binary, "mcp", "--server", g.srv.url, "--data", g.srv.dir, "--config", g.config, "--http", addr, "--hold-wait", "2s", "--metrics", maddr)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	logs := &testenv.Buffer{}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(logs, sc.Text())
			if strings.HasPrefix(sc.Text(), "airlock mcp serving") {
				close(serving)
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("airlock mcp's log:\n%s", logs)
		}
	})
	select {
	case <-serving:
	case <-time.After(30 * time.Second):
		t.Fatalf("airlock mcp --http did not serve: %s", logs)
	}
	endpoint := "http://" + addr + "/mcp"

	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	ctx := context.Background()
	_, err = httpSession(ctx, endpoint, "not-a-token")
	require.ErrorContains(t, err, "Unauthorized", "a wrong token is refused")

	a1, err := httpSession(ctx, endpoint, g.tokens[0])
	require.NoError(t, err)
	defer a1.Close()
	a2, err := httpSession(ctx, endpoint, g.tokens[1])
	require.NoError(t, err)
	defer a2.Close()

	res := call(t, a1, "exec", map[string]any{"argv": []string{"/bin/echo", "over http"}})
	require.False(t, res.IsError, text(res))
	assert.Contains(t, text(res), "over http")

	patch := map[string]any{"patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+http\n"}
	h1 := structured(t, call(t, a1, "apply_patch", patch))
	require.Equal(t, "APPROVAL_REQUIRED", h1["error_code"])
	// The other agent's same call is its own op and hold.
	h2 := structured(t, call(t, a2, "apply_patch", patch))
	require.Equal(t, "APPROVAL_REQUIRED", h2["error_code"])
	assert.NotEqual(t, h1["op_id"], h2["op_id"])
	assert.NotEqual(t, h1["hold_id"], h2["hold_id"])

	granted(t, g, h1["hold_id"].(string), h1["args_digest"].(string))
	res = call(t, a1, "apply_patch", patch)
	require.False(t, res.IsError, text(res))
	assert.Equal(t, h1["op_id"], structured(t, res)["op_id"])
	// agent2 gets nothing of agent1's: still its own pending hold.
	again := structured(t, call(t, a2, "apply_patch", patch))
	assert.Equal(t, "APPROVAL_REQUIRED", again["error_code"])
	assert.Equal(t, h2["hold_id"], again["hold_id"])
	m := scrape(t, "http://"+maddr+"/metrics")
	assert.Contains(t, m, `airlock_mcp_calls_total{outcome="completed",tool="exec"} 1`)
	assert.Contains(t, m, `airlock_mcp_calls_total{outcome="held",tool="apply_patch"} 3`)
	assert.Contains(t, m, `airlock_mcp_calls_total{outcome="completed",tool="apply_patch"} 1`)

	// And agent2's credential may not fetch agent1's result.
	_, errOut, code := run(t, "ops", "result", h1["op_id"].(string), "--server", g.srv.url, "--creds", filepath.Join(g.srv.dir, "creds", "agent2.creds"))
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "NOT_REQUESTER")
}

// httpSession connects the SDK's client to endpoint with a bearer token.
func httpSession(ctx context.Context, endpoint, token string) (*sdk.ClientSession, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return sdk.NewClient(&sdk.Implementation{Name: "test", Version: "v1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token: token, base: http.DefaultTransport}}, MaxRetries: -1,
	}, nil)
}

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// airlock serve killed between sending an upstream call and recording
// its answer: after the restart the op ends ambiguous, and the call is
// never sent again.
func TestMCPUpstreamCrash(t *testing.T) {
	g := newMCPRig(t)
	s := g.stdio(t, time.Second, nil)
	res := call(t, s, "notes__slow_append", map[string]any{"line": "crash", "delay_ms": 30000})
	require.Equal(t, "PENDING", structured(t, res)["error_code"], text(res))
	opID := structured(t, res)["op_id"].(string)
	require.Eventually(t, func() bool { return len(lines(t, g.calls)) == 1 }, 10*time.Second, 20*time.Millisecond)
	g.srv.kill()

	addr := strings.TrimPrefix(g.srv.url, "nats://")
	args := g.srv.cmd.Args[len([]string{binary, "serve", "--data", "", "--listen", "", "--monitor", "", "--log-level", "warn"}):]
	g.srv = startServer(t, g.srv.dir, addr, nil, args...)
	op := waitOpState(t, g.srv, opID)
	assert.Equal(t, events.StateAmbiguous, op.State)
	assert.Contains(t, op.Error, "never sent again")

	// A new gateway (the old one's NATS went with the server) gets the
	// same answer for the same call, and the upstream got one call.
	s = g.stdio(t, time.Second, nil)
	res = call(t, s, "notes__slow_append", map[string]any{"line": "crash", "delay_ms": 30000})
	assert.Equal(t, "EXECUTION_AMBIGUOUS", structured(t, res)["error_code"])
	res = call(t, s, "notes__peek", map[string]any{})
	require.False(t, res.IsError, text(res))
	assert.Equal(t, []string{"slow_append crash", "peek"}, trimAll(lines(t, g.calls)))
}

// scrape reads a /metrics page.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
