package command_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/events"
)

// bwrapFixture is a fixture running under bubblewrap; it skips the test
// when bwrap is not installed or cannot create its namespaces here.
func bwrapFixture(t *testing.T) fixture {
	t.Helper()
	path, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("bwrap not on PATH")
	}
	if out, err := exec.Command(path, "--ro-bind", "/", "/", "--unshare-all", "--", "true").CombinedOutput(); err != nil {
		t.Skipf("bwrap does not work here: %v: %s", err, out)
	}
	return newFixture(t, func(c *command.Config) { c.Bubblewrap = path })
}

func TestBubblewrapSandbox(t *testing.T) {
	f := bwrapFixture(t)
	t.Setenv("AIRLOCK_TEST_SECRET", "hunter2")
	outside := t.TempDir()
	hostTmp := filepath.Join(os.TempDir(), "airlock-bwrap-probe-"+strconv.Itoa(os.Getpid()))
	t.Cleanup(func() { os.Remove(hostTmp) })

	r := f.run(t, call(t, "w", argv("sh", "-c", strings.Join([]string{
		"echo cwd=$(pwd)",
		"echo in-root > written",
		"touch " + filepath.Join(outside, "PROBE") + " 2>/dev/null && echo outside=writable",
		"echo tmp-entries=$(ls -A /tmp | grep -cv '^" + filepath.Base(filepath.Dir(f.root)) + "$')",
		"touch " + hostTmp + " && echo tmp=writable",
		"echo interfaces=$(grep -c : /proc/net/dev)",
		"echo pid=$$",
		"env",
	}, "\n"))))
	require.Equal(t, 0, r.ExitCode, "stderr: %s", r.Stderr)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(r.Stdout)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}

	assert.Equal(t, f.root, got["cwd"], "cwd is the root")
	b, err := os.ReadFile(filepath.Join(f.root, "written"))
	require.NoError(t, err)
	assert.Equal(t, "in-root\n", string(b), "the root is writable and shared")
	assert.NoFileExists(t, filepath.Join(outside, "PROBE"), "the rest is read-only")
	assert.NotContains(t, got, "outside")
	assert.Equal(t, "writable", got["tmp"], "/tmp is writable")
	assert.NoFileExists(t, hostTmp, "but private")
	assert.Equal(t, "0", got["tmp-entries"], "/tmp starts empty but for the root's mount point")
	assert.Equal(t, "1", got["interfaces"], "one network interface: lo")
	assert.Less(t, atoi(t, got["pid"]), 10, "a pid namespace")
	assert.Equal(t, os.Getenv("PATH"), got["PATH"])
	assert.NotContains(t, string(r.Stdout), "hunter2")
}

func TestBubblewrapTimeoutKillsEverything(t *testing.T) {
	f := bwrapFixture(t)
	start := time.Now()
	r := f.run(t, call(t, "w", map[string]any{
		"argv":       []string{"sh", "-c", "sleep 30 & sleep 30 & (sleep 1; echo late > late) & wait"},
		"timeout_ms": 500,
	}))
	assert.True(t, r.TimedOut)
	assert.Equal(t, "SIGKILL", r.Signal)
	assert.Less(t, time.Since(start), 3*time.Second)
	// Nothing of the sandbox outlives the call: the late writer never
	// writes.
	time.Sleep(1500 * time.Millisecond)
	assert.NoFileExists(t, filepath.Join(f.root, "late"))
}

func TestBubblewrapRefusalsAndStartFailures(t *testing.T) {
	f := bwrapFixture(t)
	_, err := f.e.Execute(context.Background(), call(t, "w", argv("sh", "-c", "touch PROBE; sudo id")))
	assert.Equal(t, events.CodePrivilegeEscalation, events.CodeOf(err))
	_, err = f.e.Execute(context.Background(), call(t, "w", argv("airlock-no-such-program")))
	assert.Equal(t, events.CodeExecutorFailed, events.CodeOf(err))
	assert.NoFileExists(t, filepath.Join(f.root, "PROBE"))

	// No root: the temporary directory is bound read-write.
	r := f.run(t, call(t, "no-root", argv("sh", "-c", "touch here && pwd")))
	assert.Equal(t, 0, r.ExitCode, "%s", r.Stderr)
	assert.NoDirExists(t, strings.TrimSpace(string(r.Stdout)))
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	require.NoError(t, err, s)
	return n
}
