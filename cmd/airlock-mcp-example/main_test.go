package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// bin is the server binary that TestMain builds; every test runs it as a
// subprocess.
var bin string

// testToken is the bearer token the HTTP servers of the tests require.
const testToken = "test-token-0123"

// waitLong bounds every wait of the tests for the server.
const waitLong = 15 * time.Second

// TestMain builds the binary once (with -race when the tests run with
// it, so the server's races fail the tests too), runs the tests, and then
// checks that they leaked no goroutine.
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

// testMain is TestMain's body, returning the exit status so that the
// deferred clean-up runs.
func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "airlock-mcp-example-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "airlock-mcp-example")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the server:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: errors on successful test run:", err)
			return 1
		}
	}
	return code
}

// files are the files of one server under test, in a temporary directory.
type files struct {
	out, calls, pid, desc string
}

// newFiles names the files in a new temporary directory; none exists yet.
func newFiles(t *testing.T) files {
	dir := t.TempDir()
	return files{
		out:   filepath.Join(dir, "out.log"),
		calls: filepath.Join(dir, "calls.log"),
		pid:   filepath.Join(dir, "server.pid"),
		desc:  filepath.Join(dir, "description.txt"),
	}
}

// args are the server's required flags, then extra.
func (f files) args(extra ...string) []string {
	return append([]string{"--out", f.out, "--calls", f.calls}, extra...)
}

// read returns the content of the file at path, "" if it does not exist.
func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	require.NoError(t, err)
	return string(data)
}

// writeAtomic replaces the file at path with data through a rename, so
// the server never reads it half written.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(data), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

// logBuffer collects a server's stderr.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// proc is a server process under test.
type proc struct {
	cmd *exec.Cmd
	log *logBuffer
	// url is the endpoint of an HTTP server.
	url string
	// exited is closed when the process has been waited for, by the SDK's
	// CommandTransport (stdio) or by the test (HTTP).
	exited chan struct{}
}

// newProc prepares the server with args; its stderr goes to p.log, shown
// if the test fails. A race report of the server fails the test.
func newProc(t *testing.T, args ...string) *proc {
	p := &proc{log: &logBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = p.log
	// A race-enabled binary sleeps a second at exit by default; most tests
	// end a server or two.
	p.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	t.Cleanup(func() {
		if strings.Contains(p.log.String(), "WARNING: DATA RACE") {
			t.Error("the server reported a data race")
		}
		if t.Failed() {
			t.Logf("server %v stderr:\n%s", args, p.log.String())
		}
	})
	return p
}

// exitStatus waits for the process to exit and returns its wait status.
func (p *proc) exitStatus(t *testing.T) syscall.WaitStatus {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(waitLong):
		require.FailNow(t, "the server did not exit")
	}
	return p.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

// testClient names the tests' MCP client.
func testClient(opts *mcp.ClientOptions) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "airlock-mcp-example-test", Version: "v0"}, opts)
}

// startStdio runs the server over stdio with the SDK's CommandTransport
// and connects a client with opts to it. The session's clean-up closes
// stdin, which stops the server.
func startStdio(t *testing.T, f files, opts *mcp.ClientOptions, extra ...string) (*mcp.ClientSession, *proc) {
	t.Helper()
	p := newProc(t, f.args(extra...)...)
	cs, err := testClient(opts).Connect(testContext(t), &mcp.CommandTransport{Command: p.cmd}, nil)
	require.NoError(t, err)
	go func() {
		// The transport waits for the process when the connection closes.
		_ = cs.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cs.Close()
		<-p.exited
	})
	return cs, p
}

// urlPattern finds the endpoint in the server's log.
var urlPattern = regexp.MustCompile(`url=(http://\S+/mcp)`)

// startHTTP runs the server with --http on a free port and returns once it
// logged its endpoint. Its clean-up stops the server with SIGTERM.
func startHTTP(t *testing.T, f files, extra ...string) *proc {
	t.Helper()
	p := newProc(t, f.args(append([]string{"--http", "127.0.0.1:0"}, extra...)...)...)
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	deadline := time.Now().Add(waitLong)
	for time.Now().Before(deadline) {
		if m := urlPattern.FindStringSubmatch(p.log.String()); m != nil {
			p.url = m[1]
			return p
		}
		select {
		case <-p.exited:
			require.FailNow(t, "the server exited before serving", "%v", p.cmd.ProcessState)
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.FailNow(t, "the server did not log its url")
	return nil
}

// stop ends an HTTP server: SIGTERM, then SIGKILL if it does not exit.
func (p *proc) stop(t *testing.T) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(waitLong):
		t.Error("the server did not stop on SIGTERM")
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// bearer is an http.RoundTripper that adds a bearer token, if any.
type bearer struct {
	token string
	base  http.RoundTripper
}

// RoundTrip sends r with the Authorization header.
func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(r)
}

// httpClient is an HTTP client with its own connections, closed by the
// test's clean-up, sending token (if any) as a bearer token.
func httpClient(t *testing.T, token string) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: &bearer{token: token, base: tr}}
}

// connectHTTP connects a client with opts to the server at url with
// token. A session is closed by the test's clean-up.
func connectHTTP(t *testing.T, url, token string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: httpClient(t, token)}
	cs, err := testClient(opts).Connect(testContext(t), tr, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

// transports are the ways the tests run the server.
var transports = []string{"stdio", "http"}

// start runs the server over transport ("stdio" or "http", which requires
// testToken) and connects a client with opts.
func start(t *testing.T, transport string, f files, opts *mcp.ClientOptions, extra ...string) (*mcp.ClientSession, *proc) {
	t.Helper()
	if transport == "stdio" {
		return startStdio(t, f, opts, extra...)
	}
	p := startHTTP(t, f, append([]string{"--token", testToken}, extra...)...)
	cs, err := connectHTTP(t, p.url, testToken, opts)
	require.NoError(t, err)
	return cs, p
}

// forEachTransport runs test as a parallel subtest per transport.
func forEachTransport(t *testing.T, test func(t *testing.T, transport string)) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			test(t, tr)
		})
	}
}

// testContext bounds a test's calls.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// callTool calls tool with args and requires a result (which may be a
// tool error).
func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(testContext(t), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err, "calling %s", tool)
	return res
}

// text returns the one text content of res.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	require.Len(t, res.Content, 1)
	tc, ok := res.Content[0].(*mcp.TextContent)
	require.True(t, ok, "content is %T", res.Content[0])
	return tc.Text
}

// structured returns the structured content of res as JSON.
func structured(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	data, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	return string(data)
}

// requireLines requires res to be a successful answer: text and
// {"lines": n}.
func requireLines(t *testing.T, res *mcp.CallToolResult, wantText string, n int) {
	t.Helper()
	require.False(t, res.IsError, "tool error: %v", res.Content)
	assert.Equal(t, wantText, text(t, res))
	assert.JSONEq(t, `{"lines":`+strconv.Itoa(n)+`}`, structured(t, res))
}
