//go:build airlocktest

package patch_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/patch"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crashDirs tells the helper process where the root and ledger are.
const crashDirs = "AIRLOCK_PATCH_CRASH_DIRS"

// TestCrashHelper is the child process of the crash tests: it applies
// threeFiles and is killed at the armed failpoint.
func TestCrashHelper(t *testing.T) {
	dirs := os.Getenv(crashDirs)
	if dirs == "" {
		t.Skip("run by the crash tests")
	}
	root, ledger := filepath.Dir(dirs), dirs
	p, err := patch.New(patch.Config{Root: func(string) string { return root }, LedgerDir: ledger})
	require.NoError(t, err)
	_, err = p.Execute(context.Background(), call(t, "op_crash", threeFiles))
	require.NoError(t, err)
}

// crashAt runs the helper with failpoint armed and checks it was killed.
func crashAt(t *testing.T, fp string) *env {
	t.Helper()
	e := threeFilesEnv(t)
	ledger := filepath.Join(e.root, ".ledger") // a path the helper can derive the root from
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirs+"="+ledger, failpoint.EnvVar+"="+fp+":apply_patch")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "helper was not killed: %v\n%s", err, out)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "helper: %v\n%s", err, out)
	re, err := patch.New(patch.Config{Root: func(string) string { return e.root }, LedgerDir: ledger})
	require.NoError(t, err)
	e.p, e.ledger = re, ledger
	return e
}

func TestCrashPatchBetweenFiles(t *testing.T) {
	e := crashAt(t, failpoint.PatchBetweenFiles)
	assert.Equal(t, "ONE\ntwo\n", e.read(t, "a.txt"), "the first file was written")
	assert.NoFileExists(t, filepath.Join(e.root, "new.txt"), "the second was not")
	rec, err := e.p.Recover(context.Background(), executor.Call{OpID: "op_crash", Workspace: testWS}, executor.Lost{Attempt: "att-1", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Ambiguous, rec.Action)
	assert.Contains(t, rec.Known, "file 1 of 3 holds its post-image")
	assert.Contains(t, rec.Known, "file 2 of 3 holds its pre-image")
	assert.Contains(t, rec.Known, "file 3 of 3 holds its pre-image")
}

func TestCrashPatchAfterEffect(t *testing.T) {
	e := crashAt(t, failpoint.AfterEffect)
	rec, err := e.p.Recover(context.Background(), executor.Call{OpID: "op_crash", Workspace: testWS}, executor.Lost{Attempt: "att-1", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Done, rec.Action)
	assert.Contains(t, string(rec.Result), `"path":"new.txt","action":"add"`)
	assert.Equal(t, "fresh\n", e.read(t, "new.txt"))
}
