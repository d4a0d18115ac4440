package command_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/events"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashHelperEnv) != "" {
		crashHelper()
		return
	}
	goleak.VerifyTestMain(m)
}

// fixture is an Exec over a fresh workspace root and ledger.
type fixture struct {
	e      *command.Exec
	root   string
	ledger string
}

// newFixture returns an Exec whose workspace "w" has a root; mod may
// change the config first.
func newFixture(t testing.TB, mod ...func(*command.Config)) fixture {
	t.Helper()
	f := fixture{root: t.TempDir(), ledger: t.TempDir()}
	cfg := command.Config{
		LedgerDir: f.ledger,
		Root: func(ws string) string {
			if ws == "w" {
				return f.root
			}
			return ""
		},
	}
	for _, m := range mod {
		m(&cfg)
	}
	e, err := command.New(cfg)
	require.NoError(t, err)
	f.e = e
	return f
}

var opSeq atomic.Int64

// call builds a call of workspace ws with a fresh op and attempt id.
func call(t testing.TB, ws string, args any) executor.Call {
	t.Helper()
	raw, ok := args.([]byte)
	if !ok {
		var err error
		raw, err = json.Marshal(args)
		require.NoError(t, err)
	}
	n := strconv.FormatInt(opSeq.Add(1), 10)
	return executor.Call{
		OpID: "op" + n, Attempt: "att" + n,
		Workspace: ws, Agent: "bot", Tool: "exec", Args: raw,
	}
}

func argv(a ...string) map[string]any { return map[string]any{"argv": a} }

// run executes c and decodes its result.
func (f fixture) run(t testing.TB, c executor.Call) command.Result {
	t.Helper()
	out, err := f.e.Execute(context.Background(), c)
	require.NoError(t, err)
	require.LessOrEqual(t, len(out), events.MaxResultBytes)
	var r command.Result
	require.NoError(t, json.Unmarshal(out, &r), string(out))
	return r
}

// ledgerEntries lists every file under the ledger directory, with its
// size: a record appended to a file changes it too.
func (f fixture) ledgerEntries(t testing.TB) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(f.ledger, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != f.ledger {
			rel, _ := filepath.Rel(f.ledger, p)
			info, err := d.Info()
			if err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("%s %d", rel, info.Size()))
		}
		return err
	}))
	return out
}

// ledgerBytes is every file of the ledger directory, concatenated: what
// is on disk, whichever process wrote it.
func (f fixture) ledgerBytes(t testing.TB) string {
	t.Helper()
	var all []byte
	entries, err := os.ReadDir(f.ledger)
	require.NoError(t, err)
	for _, en := range entries {
		if b, err := os.ReadFile(filepath.Join(f.ledger, en.Name())); err == nil {
			all = append(all, b...)
		}
	}
	return string(all)
}

// gone reports whether pid no longer runs (absent, or a zombie nobody
// reaped yet).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// readPids reads one pid a line.
func readPids(t testing.TB, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var pids []int
	for _, l := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(l)
		require.NoError(t, err)
		pids = append(pids, n)
	}
	return pids
}

func waitGone(t testing.TB, pids []int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, p := range pids {
			if !gone(p) {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "pids %v still running", pids)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
