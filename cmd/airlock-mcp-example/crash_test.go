package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readPID returns the pid in the pid file at path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(read(t, path)))
	require.NoError(t, err, "pid file %q", read(t, path))
	return pid
}

// callInBackground calls tool with args and returns a channel that gets
// the call's error.
func callInBackground(t *testing.T, cs *mcp.ClientSession, tool string, args any) <-chan error {
	errc := make(chan error, 1)
	ctx := testContext(t)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		errc <- err
	}()
	return errc
}

// awaitFile waits until the file at path holds want.
func awaitFile(t *testing.T, path, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return read(t, path) == want }, waitLong, 5*time.Millisecond,
		"%s never held %q; it holds %q", path, want, read(t, path))
}

// awaitCallError waits for the error of a call started with
// callInBackground, which must fail.
func awaitCallError(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		require.Error(t, err, "the call returned no error")
		return err
	case <-time.After(waitLong):
		require.FailNow(t, "the call did not return")
		return nil
	}
}

// A server killed during slow_append's delay leaves the effect and the
// recorded call, with no answer: the client's call fails. A server started
// again on the same files counts on from there.
func TestSlowAppendKilled(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		f := newFiles(t)
		cs, p := start(t, transport, f, nil, "--pid-file", f.pid)
		pid := readPID(t, f.pid)
		assert.Equal(t, p.cmd.Process.Pid, pid)

		errc := callInBackground(t, cs, "slow_append", map[string]any{"line": "unanswered", "delay_ms": 600000})
		awaitFile(t, f.out, "unanswered\n")
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		t.Logf("call error: %v", awaitCallError(t, errc))
		ws := p.exitStatus(t)
		assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "exit status %v", ws)
		assert.Equal(t, "unanswered\n", read(t, f.out))
		assert.Equal(t, "slow_append unanswered\n", read(t, f.calls))

		cs2, p2 := start(t, transport, f, nil, "--pid-file", f.pid)
		assert.Equal(t, p2.cmd.Process.Pid, readPID(t, f.pid))
		requireLines(t, callTool(t, cs2, "peek", nil), "1", 1)
		requireLines(t, callTool(t, cs2, "append", map[string]any{"line": "restarted"}), "appended line 2", 2)
		assert.Equal(t, "unanswered\nrestarted\n", read(t, f.out))
		assert.Equal(t, "slow_append unanswered\npeek\nappend restarted\n", read(t, f.calls))
	})
}

// garbage over stdio breaks the connection with a line that is not JSON
// and exits with status 3, after recording its call.
func TestGarbageStdio(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	cs, p := startStdio(t, f, nil)
	requireLines(t, callTool(t, cs, "append", map[string]any{"line": "before"}), "appended line 1", 1)
	_, err := cs.CallTool(testContext(t), &mcp.CallToolParams{Name: "garbage"})
	require.Error(t, err)
	t.Logf("call error: %v", err)
	assert.Equal(t, exitGarbage, p.exitStatus(t).ExitStatus())
	assert.Equal(t, "append before\ngarbage\n", read(t, f.calls))
	assert.Equal(t, "before\n", read(t, f.out))
}

// garbage over HTTP exits with status 3 without answering.
func TestGarbageHTTP(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	cs, p := start(t, "http", f, nil)
	errc := callInBackground(t, cs, "garbage", nil)
	assert.Equal(t, exitGarbage, p.exitStatus(t).ExitStatus())
	t.Logf("call error: %v", awaitCallError(t, errc))
	assert.Equal(t, "garbage\n", read(t, f.calls))
	assert.NoFileExists(t, f.out)
}

// The garbage line reaches stdout whole, after the last JSON-RPC message
// and not inside one: seen by a raw client speaking JSON lines.
func TestGarbageLineOnStdout(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	p := newProc(t, f.args()...)
	stdin, err := p.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil { // the test failed before its Wait
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})

	lines := bufio.NewScanner(stdout)
	send := func(msg string) {
		_, err := stdin.Write([]byte(msg + "\n"))
		require.NoError(t, err)
	}
	send(initializeBody)
	require.True(t, lines.Scan(), "no answer to initialize: %v", lines.Err())
	var answer struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	require.NoError(t, json.Unmarshal(lines.Bytes(), &answer), "answer %q", lines.Text())
	assert.Equal(t, 1, answer.ID)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"garbage","arguments":{}}}`)
	require.True(t, lines.Scan(), "no output after garbage: %v", lines.Err())
	assert.Equal(t, strings.TrimSuffix(garbageLine, "\n"), lines.Text())
	assert.False(t, json.Valid(lines.Bytes()))
	assert.False(t, lines.Scan(), "output after the garbage line: %q", lines.Text())

	err = p.cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, exitGarbage, exit.ExitCode())
	assert.Equal(t, "garbage\n", read(t, f.calls))
}

// SIGTERM stops the server cleanly (status 0), even with a slow_append
// sleeping; the line it appended stays.
func TestSignalStops(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		f := newFiles(t)
		cs, p := start(t, transport, f, nil)
		errc := callInBackground(t, cs, "slow_append", map[string]any{"line": "interrupted", "delay_ms": 600000})
		awaitFile(t, f.out, "interrupted\n")
		begin := time.Now()
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		ws := p.exitStatus(t)
		assert.True(t, ws.Exited() && ws.ExitStatus() == 0, "exit status %v", ws)
		assert.Less(t, time.Since(begin), shutdownTimeout, "the shutdown waited for the delay")
		select {
		case err := <-errc:
			t.Logf("call error: %v", err)
		case <-time.After(waitLong):
			t.Error("the call did not return")
		}
		assert.Equal(t, "interrupted\n", read(t, f.out))
		assert.Equal(t, "slow_append interrupted\n", read(t, f.calls))
	})
}

// Missing or inconsistent flags are refused before anything runs.
func TestFlags(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	cases := []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"--calls", f.calls}, 2, "--out is required"},
		{[]string{"--out", f.out}, 2, "--calls is required"},
		{f.args("--token", "x"), 2, "--token needs --http"},
		{f.args("--http", "127.0.0.1:0", "--token", "two words"), 2, "--token must not contain white space"},
		{f.args("extra"), 2, "unexpected arguments"},
		{f.args("--description-file", f.desc), 1, "reading the description"},
		{f.args("--http", "256.0.0.1:1"), 1, "listening on 256.0.0.1:1"},
	}
	for _, c := range cases {
		var stderr strings.Builder
		cmd := exec.Command(bin, c.args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if assert.ErrorAs(t, err, &exit, "%v", c.args) {
			assert.Equal(t, c.status, exit.ExitCode(), "%v", c.args)
		}
		assert.Contains(t, stderr.String(), c.want, "%v", c.args)
	}
	assert.NoFileExists(t, f.out)
	assert.NoFileExists(t, f.calls)
}
