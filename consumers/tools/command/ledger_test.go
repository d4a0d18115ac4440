package command_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/ledger"
)

const crashHelperEnv = "AIRLOCK_EXEC_CRASH_HELPER"

// crashHelper runs in a subprocess: one Execute of a long call, until the
// test SIGKILLs the process, as a crash would.
func crashHelper() {
	root, ledger := os.Getenv("HELPER_ROOT"), os.Getenv("HELPER_LEDGER")
	e, err := command.New(command.Config{LedgerDir: ledger, Root: func(string) string { return root }})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	args := []byte(os.Getenv("HELPER_ARGS"))
	_, err = e.Execute(context.Background(), executor.Call{
		OpID: os.Getenv("HELPER_OP"), Attempt: os.Getenv("HELPER_ATTEMPT"), Workspace: "w", Args: args,
	})
	fmt.Fprintln(os.Stderr, "helper: Execute returned", err)
	os.Exit(3)
}

func TestRecoverNeverStarted(t *testing.T) {
	f := newFixture(t)
	c := call(t, "w", argv("true"))
	rec, err := f.e.Recover(context.Background(), c, executor.Lost{Attempt: c.Attempt, Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Recovery{Action: executor.Rerun}, rec)
}

func TestRecoverDone(t *testing.T) {
	f := newFixture(t)
	c := call(t, "w", argv("sh", "-c", "echo hello; exit 7"))
	out, err := f.e.Execute(context.Background(), c)
	require.NoError(t, err)
	rec, err := f.e.Recover(context.Background(), c, executor.Lost{Attempt: c.Attempt, Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Done, rec.Action)
	assert.Equal(t, string(out), string(rec.Result))
	kept, err := f.e.Kept(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{c.OpID}, kept)

	// Another attempt of the same op that never started is its own story.
	rec, err = f.e.Recover(context.Background(), c, executor.Lost{Attempt: "other-attempt", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Rerun, rec.Action)
}

func TestCrashMidExecIsAmbiguous(t *testing.T) {
	f := newFixture(t)
	c := call(t, "w", argv("true"))
	helper := startHelper(t, f, c, mustJSON(t, argv("sh", "-c", "echo $$ > pid; exec sleep 30")))
	pidFile := filepath.Join(f.root, "pid")
	var childPID int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || len(b) == 0 || b[len(b)-1] != '\n' {
			return false
		}
		childPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		// The pid is on disk, in the helper's started record.
		return strings.Contains(f.ledgerBytes(t), fmt.Sprintf(`"pid":%d`, childPID))
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()

	// The child dies with its parent (Pdeathsig), and the ledger shows an
	// attempt started without an exit.
	waitGone(t, []int{childPID})
	ledger.Reload(f.ledger) // this process reads what the helper wrote
	_, err := (ledger.Ledger{Dir: f.ledger}).Done(c.OpID, c.Attempt)
	assert.ErrorIs(t, err, fs.ErrNotExist, "no result recorded")
	rec, err := f.e.Recover(context.Background(), c, executor.Lost{Attempt: c.Attempt, Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Ambiguous, rec.Action)
	assert.Regexp(t, fmt.Sprintf(`^exec attempt %s started \d{4}-\d\d-\d\dT\S+ \(pid %d\) and has no recorded exit; it is never run again$`,
		c.Attempt, childPID), rec.Known)

	// The started attempt is never spawned again, even if asked to.
	c.Args, _ = json.Marshal(argv("touch", "PROBE"))
	_, err = f.e.Execute(context.Background(), c)
	assert.Equal(t, events.CodeAmbiguous, events.CodeOf(err))
	assert.NoFileExists(t, filepath.Join(f.root, "PROBE"))
}

// startHelper starts crashHelper on f's root and ledger for call c's op
// and attempt, with args; extra are more environment variables.
func startHelper(t *testing.T, f fixture, c executor.Call, args []byte, extra ...string) *exec.Cmd {
	t.Helper()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), crashHelperEnv+"=1", "HELPER_ROOT="+f.root, "HELPER_LEDGER="+f.ledger,
		"HELPER_OP="+c.OpID, "HELPER_ATTEMPT="+c.Attempt, "HELPER_ARGS="+string(args))
	helper.Env = append(helper.Env, extra...)
	helper.Stderr = os.Stderr
	require.NoError(t, helper.Start())
	return helper
}

// TestCrashAfterEffectIsDone kills the process at the after-effect
// failpoint (test builds only: go test -tags airlocktest): the program
// ran once, its result is in the ledger, recovery completes the op with
// it and runs nothing again.
func TestCrashAfterEffectIsDone(t *testing.T) {
	if !failpoint.Enabled {
		t.Skip("failpoints need -tags airlocktest")
	}
	f := newFixture(t)
	c := call(t, "w", argv("true"))
	helper := startHelper(t, f, c, mustJSON(t, argv("sh", "-c", "echo ran >> runs; echo out")),
		failpoint.EnvVar+"="+failpoint.AfterEffect+":exec")
	err := helper.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, "signal: killed", exit.Error())

	b, err := os.ReadFile(filepath.Join(f.root, "runs"))
	require.NoError(t, err)
	assert.Equal(t, "ran\n", string(b))
	rec, err := f.e.Recover(context.Background(), c, executor.Lost{Attempt: c.Attempt, Own: true})
	require.NoError(t, err)
	require.Equal(t, executor.Done, rec.Action)
	var r command.Result
	require.NoError(t, json.Unmarshal(rec.Result, &r))
	assert.Equal(t, "out\n", string(r.Stdout))
	assert.Equal(t, 0, r.ExitCode)
}

// TestRecoverCraftedLedger reads records in the layout of earlier
// versions (a directory per op), which a data dir may still hold after an
// upgrade: recovery decides from them as it did.
func TestRecoverCraftedLedger(t *testing.T) {
	f := newFixture(t)
	c := call(t, "w", argv("true"))
	dir := filepath.Join(f.ledger, c.OpID)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
	}
	recover := func(attempt string) executor.Recovery {
		rec, err := f.e.Recover(context.Background(), c, executor.Lost{Attempt: attempt, Own: true})
		require.NoError(t, err)
		return rec
	}

	// Crashed between the started record and the spawn: no pid.
	write("a1.started", `{"attempt":"a1","argv_sha256":"sha256:00","started_at":"2026-01-02T03:04:05Z"}`)
	assert.Equal(t, executor.Recovery{Action: executor.Ambiguous,
		Known: "exec attempt a1 started 2026-01-02T03:04:05Z (pid unknown) and has no recorded exit; it is never run again"}, recover("a1"))

	write("a2.started", `{"attempt":"a2","argv_sha256":"sha256:00","started_at":"2026-01-02T03:04:05Z","pid":4242}`)
	assert.Equal(t, executor.Recovery{Action: executor.Ambiguous,
		Known: "exec attempt a2 started 2026-01-02T03:04:05Z (pid 4242) and has no recorded exit; it is never run again"}, recover("a2"))

	result := `{"exit_code":0,"timed_out":false,"duration_ms":1,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false}`
	write("a3.started", `{"attempt":"a3"}`)
	write("a3.done", result)
	assert.Equal(t, executor.Recovery{Action: executor.Done, Result: json.RawMessage(result)}, recover("a3"))

	write("a4.started", `{torn`)
	assert.Equal(t, executor.Ambiguous, recover("a4").Action)

	// Only the named attempt counts; a stray temporary file is no record.
	write(".a5.started.tmp-123", `{"attempt":"a5"}`)
	assert.Equal(t, executor.Rerun, recover("a5").Action)

	// Ids that are not file names are refused, not joined into paths.
	for _, bad := range []string{"", "..", "../x", "a/b", ".hidden"} {
		_, err := f.e.Recover(context.Background(), c, executor.Lost{Attempt: bad, Own: true})
		assert.Error(t, err, "attempt %q", bad)
		_, err = f.e.Recover(context.Background(), executor.Call{OpID: bad}, executor.Lost{Attempt: "a1", Own: true})
		assert.Error(t, err, "op %q", bad)
	}
}

func TestLedgerIdsRefusedBeforeRunning(t *testing.T) {
	f := newFixture(t)
	c := call(t, "w", argv("touch", "PROBE"))
	c.OpID = "../escape"
	_, err := f.e.Execute(context.Background(), c)
	assert.Equal(t, events.CodeExecutorFailed, events.CodeOf(err))
	assert.NoFileExists(t, filepath.Join(f.root, "PROBE"))
}
