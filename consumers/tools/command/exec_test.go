package command_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/events"
)

func TestToolAndClass(t *testing.T) {
	f := newFixture(t)
	assert.Equal(t, "exec", f.e.Tool())
	assert.Equal(t, events.ClassExec, f.e.Class())
}

func TestEnvCleared(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_SECRET", "hunter2")
	f := newFixture(t)
	r := f.run(t, call(t, "w", argv("/usr/bin/env")))
	require.Equal(t, 0, r.ExitCode, string(r.Stderr))
	lines := strings.Split(strings.TrimSpace(string(r.Stdout)), "\n")
	require.Len(t, lines, 1, "child env: %q", r.Stdout)
	assert.Equal(t, "PATH="+os.Getenv("PATH"), lines[0])
	assert.NotContains(t, string(r.Stdout), "hunter2")
}

func TestEnvAllowList(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_SECRET", "hunter2")
	t.Setenv("AIRLOCK_TEST_LANG", "C.UTF-8")
	f := newFixture(t, func(c *command.Config) { c.EnvAllow = []string{"PATH", "AIRLOCK_TEST_LANG", "AIRLOCK_TEST_UNSET"} })
	r := f.run(t, call(t, "w", argv("/usr/bin/env")))
	got := strings.Split(strings.TrimSpace(string(r.Stdout)), "\n")
	assert.ElementsMatch(t, []string{"PATH=" + os.Getenv("PATH"), "AIRLOCK_TEST_LANG=C.UTF-8"}, got)

	// An empty allowlist: nothing at all, and a bare name is not found.
	f = newFixture(t, func(c *command.Config) { c.EnvAllow = []string{} })
	r = f.run(t, call(t, "w", argv("/usr/bin/env")))
	assert.Empty(t, r.Stdout)
	_, err := f.e.Execute(context.Background(), call(t, "w", argv("env")))
	assert.Equal(t, events.CodeExecutorFailed, events.CodeOf(err))
}

func TestTimeoutKillsProcessGroup(t *testing.T) {
	f := newFixture(t)
	pids := filepath.Join(f.root, "pids")
	script := `sleep 30 & echo $! >> pids; sleep 30 & echo $! >> pids; (sleep 30; echo late > late) & echo $! >> pids; echo $$ >> pids; wait`
	c := call(t, "w", map[string]any{"argv": []string{"sh", "-c", script}, "timeout_ms": 500})
	start := time.Now()
	r := f.run(t, c)
	took := time.Since(start)

	assert.True(t, r.TimedOut)
	assert.Equal(t, -1, r.ExitCode)
	assert.Equal(t, "SIGKILL", r.Signal)
	assert.GreaterOrEqual(t, r.DurationMS, int64(500))
	assert.Less(t, r.DurationMS, int64(2000))
	assert.Less(t, took, 3*time.Second)
	got := readPids(t, pids)
	require.Len(t, got, 4)
	waitGone(t, got)
	assert.NoFileExists(t, filepath.Join(f.root, "late"))
}

func TestDefaultTimeout(t *testing.T) {
	f := newFixture(t, func(c *command.Config) { c.DefaultTimeout = 300 * time.Millisecond })
	r := f.run(t, call(t, "w", argv("sleep", "30")))
	assert.True(t, r.TimedOut)
	assert.GreaterOrEqual(t, r.DurationMS, int64(300))
	assert.Less(t, r.DurationMS, int64(2000))

	// timeout_ms overrides it.
	r = f.run(t, call(t, "w", map[string]any{"argv": []string{"sleep", "0.5"}, "timeout_ms": 5000}))
	assert.False(t, r.TimedOut)
	assert.Equal(t, 0, r.ExitCode)
}

func TestExitLeavesNoProcessBehind(t *testing.T) {
	f := newFixture(t)
	// The shell exits at once; its background sleep holds stdout open
	// and would run on: the group is killed when the leader exits.
	start := time.Now()
	r := f.run(t, call(t, "w", argv("sh", "-c", `sleep 30 & echo $! > pid; echo started`)))
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Equal(t, 0, r.ExitCode)
	assert.False(t, r.TimedOut)
	assert.Equal(t, "started\n", string(r.Stdout))
	waitGone(t, readPids(t, filepath.Join(f.root, "pid")))
}

func TestOutputCapped(t *testing.T) {
	f := newFixture(t)
	script := `head -c 3145728 /dev/zero | tr '\0' a; head -c 3145728 /dev/zero | tr '\0' b >&2; echo done > marker`
	start := time.Now()
	c := call(t, "w", map[string]any{"argv": []string{"sh", "-c", script}, "timeout_ms": 20000})
	out, err := f.e.Execute(context.Background(), c)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.LessOrEqual(t, len(out), events.MaxResultBytes)
	var r command.Result
	require.NoError(t, json.Unmarshal(out, &r))
	assert.False(t, r.TimedOut)
	assert.Equal(t, 0, r.ExitCode)
	assert.True(t, r.StdoutTruncated)
	assert.True(t, r.StderrTruncated)
	// 1 MiB of each is captured; the stored result is cut further to fit
	// events.MaxResultBytes.
	assert.Greater(t, len(r.Stdout)+len(r.Stderr), events.MaxResultBytes-1024)
	assert.Equal(t, bytes.Repeat([]byte("a"), len(r.Stdout)), r.Stdout)
	assert.Equal(t, bytes.Repeat([]byte("b"), len(r.Stderr)), r.Stderr)
	assert.FileExists(t, filepath.Join(f.root, "marker"), "the child was not blocked by the cap")
}

func TestOutputCapConfigured(t *testing.T) {
	f := newFixture(t, func(c *command.Config) { c.MaxOutput = 10 })
	r := f.run(t, call(t, "w", argv("sh", "-c", "echo 0123456789abc; echo -n short >&2")))
	assert.Equal(t, "0123456789", string(r.Stdout))
	assert.True(t, r.StdoutTruncated)
	assert.Equal(t, "short", string(r.Stderr))
	assert.False(t, r.StderrTruncated)
}

func TestExitCodeAndSignal(t *testing.T) {
	f := newFixture(t)
	r := f.run(t, call(t, "w", argv("sh", "-c", "echo out; echo err >&2; exit 3")))
	assert.Equal(t, command.Result{ExitCode: 3, DurationMS: r.DurationMS, Stdout: []byte("out\n"), Stderr: []byte("err\n")}, r)

	r = f.run(t, call(t, "w", argv("sh", "-c", "kill -TERM $$")))
	assert.Equal(t, -1, r.ExitCode)
	assert.Equal(t, "SIGTERM", r.Signal)
	assert.False(t, r.TimedOut)
}

func TestResultShape(t *testing.T) {
	f := newFixture(t)
	out, err := f.e.Execute(context.Background(), call(t, "w", argv("sh", "-c", "printf 'a<b>&'; printf '\\377\\376' >&2")))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	delete(m, "duration_ms")
	assert.Equal(t, map[string]any{
		"exit_code": 0.0, "timed_out": false,
		"stdout": "a<b>&", "stderr_base64": "//4=",
		"stdout_truncated": false, "stderr_truncated": false,
	}, m)
	assert.Contains(t, string(out), `"duration_ms":`)
	assert.Contains(t, string(out), `"stdout":"a<b>&"`, "no HTML escaping")
}

func TestCwdIsWorkspaceRoot(t *testing.T) {
	f := newFixture(t)
	r := f.run(t, call(t, "w", argv("pwd")))
	want, err := filepath.EvalSymlinks(f.root)
	require.NoError(t, err)
	assert.Equal(t, want+"\n", string(r.Stdout))

	// A relative argv[0] is taken from the root.
	require.NoError(t, os.WriteFile(filepath.Join(f.root, "run.sh"), []byte("#!/bin/sh\necho ran $1\n"), 0o755))
	r = f.run(t, call(t, "w", argv("./run.sh", "x")))
	assert.Equal(t, "ran x\n", string(r.Stdout))
}

func TestNoRootRunsInFreshTempDir(t *testing.T) {
	f := newFixture(t)
	r1 := f.run(t, call(t, "other", argv("sh", "-c", "pwd; ls -A; touch left")))
	r2 := f.run(t, call(t, "other", argv("sh", "-c", "pwd; ls -A")))
	d1 := strings.Split(string(r1.Stdout), "\n")[0]
	d2 := strings.Split(string(r2.Stdout), "\n")[0]
	assert.NotEqual(t, d1, d2)
	assert.Equal(t, d1+"\n", string(r1.Stdout), "empty at start")
	assert.Equal(t, d2+"\n", string(r2.Stdout), "nothing left from the first call")
	assert.NoDirExists(t, d1)
	assert.NoDirExists(t, d2)
}

func TestMissingRoot(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	f := newFixture(t, func(c *command.Config) { c.Root = func(string) string { return missing } })
	probe := filepath.Join(t.TempDir(), "PROBE")
	_, err := f.e.Execute(context.Background(), call(t, "w", argv("touch", probe)))
	assert.Equal(t, events.CodeNoWorkspaceRoot, events.CodeOf(err))
	assert.NoFileExists(t, probe)
	assert.Empty(t, f.ledgerEntries(t))

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	f = newFixture(t, func(c *command.Config) { c.Root = func(string) string { return file } })
	_, err = f.e.Execute(context.Background(), call(t, "w", argv("touch", probe)))
	assert.Equal(t, events.CodeNoWorkspaceRoot, events.CodeOf(err))
	assert.NoFileExists(t, probe)
}

func TestStartFailures(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, os.WriteFile(filepath.Join(f.root, "noexec.sh"), []byte("#!/bin/sh\ntouch PROBE\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(f.root, "badformat"), []byte("\x7fELF garbage"), 0o755))
	for _, a := range [][]string{
		{"airlock-no-such-program"},
		{"./missing.sh"},
		{"/nonexistent/bin/x"},
		{"./noexec.sh"},
		{"."},
		{"./badformat"}, // passes the checks, fails in execve
	} {
		t.Run(a[0], func(t *testing.T) {
			c := call(t, "w", argv(a...))
			_, err := f.e.Execute(context.Background(), c)
			assert.Equal(t, events.CodeExecutorFailed, events.CodeOf(err), "%v", err)
			assert.NoFileExists(t, filepath.Join(f.root, "PROBE"))
			// Nothing ran, so nothing is left that would make a recovery
			// call it ambiguous.
			rec, err := f.e.Recover(context.Background(), c, executor.Lost{Attempt: c.Attempt, Own: true})
			require.NoError(t, err)
			assert.Equal(t, executor.Rerun, rec.Action)
		})
	}
}

func TestContextCancelKillsGroup(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	c := call(t, "w", argv("sh", "-c", "sleep 30 & echo $! > pids; echo $$ >> pids; wait"))
	go func() {
		// Cancel once the child is up (or after a while regardless).
		defer cancel()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if b, _ := os.ReadFile(filepath.Join(f.root, "pids")); bytes.Count(b, []byte("\n")) == 2 {
				return
			}
		}
	}()
	start := time.Now()
	_, err := f.e.Execute(ctx, c)
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 5*time.Second)
	waitGone(t, readPids(t, filepath.Join(f.root, "pids")))

	// It ran and was killed: recovery knows the result.
	rec, err := f.e.Recover(context.Background(), c, executor.Lost{Attempt: c.Attempt, Own: true})
	require.NoError(t, err)
	require.Equal(t, executor.Done, rec.Action)
	var r command.Result
	require.NoError(t, json.Unmarshal(rec.Result, &r))
	assert.Equal(t, "SIGKILL", r.Signal)
	assert.False(t, r.TimedOut)
}

func TestCancelledBeforeStartRunsNothing(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.e.Execute(ctx, call(t, "w", argv("touch", "PROBE")))
	require.True(t, errors.Is(err, context.Canceled))
	assert.NoFileExists(t, filepath.Join(f.root, "PROBE"))
	assert.Empty(t, f.ledgerEntries(t))
}

func TestConcurrentCalls(t *testing.T) {
	f := newFixture(t)
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		c := call(t, "w", argv("sh", "-c", "echo $0", string(rune('a'+i))))
		go func() {
			out, err := f.e.Execute(context.Background(), c)
			if err == nil {
				var r command.Result
				if err = json.Unmarshal(out, &r); err == nil && string(r.Stdout) != string(rune('a'+i))+"\n" {
					err = errors.New("wrong output " + string(r.Stdout))
				}
			}
			errs <- err
		}()
	}
	for range n {
		assert.NoError(t, <-errs)
	}
}
