package patch_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/tools/patch"
	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/require"
)

const testWS = "dev"

// env is a workspace root and a Patch serving it.
type env struct {
	root   string
	ledger string
	p      *patch.Patch
}

func newEnv(t *testing.T, mod ...func(*patch.Config)) *env {
	t.Helper()
	e := &env{root: t.TempDir(), ledger: filepath.Join(t.TempDir(), "ledger")}
	cfg := patch.Config{
		Root: func(ws string) string {
			if ws == testWS {
				return e.root
			}
			return ""
		},
		LedgerDir: e.ledger,
	}
	for _, m := range mod {
		m(&cfg)
	}
	p, err := patch.New(cfg)
	require.NoError(t, err)
	e.p = p
	return e
}

// write creates root/name holding content.
func (e *env) write(t *testing.T, name, content string) {
	t.Helper()
	path := filepath.Join(e.root, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// read returns root/name's content.
func (e *env) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, name))
	require.NoError(t, err)
	return string(b)
}

func args(t *testing.T, diff string) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(map[string]string{"patch": diff})
	require.NoError(t, err)
	return b
}

func call(t *testing.T, op, diff string) executor.Call {
	return executor.Call{OpID: op, Workspace: testWS, Agent: "bot", Tool: "apply_patch", Attempt: "att-1", Args: args(t, diff)}
}

// run executes diff as op and decodes the result.
func (e *env) run(t *testing.T, op, diff string) (patch.Result, json.RawMessage, error) {
	t.Helper()
	raw, err := e.p.Execute(context.Background(), call(t, op, diff))
	var res patch.Result
	if err == nil {
		require.NoError(t, json.Unmarshal(raw, &res))
	}
	return res, raw, err
}

func requireCode(t *testing.T, err error, code events.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, events.CodeOf(err), "error: %v", err)
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// entry is what a snapshot records of one path.
type entry struct {
	Mode    fs.FileMode
	ModTime int64
	Inode   uint64
	Content string // file content, or symlink target
}

// snapshot records every path under dirs, to prove nothing was touched.
func snapshot(t *testing.T, dirs ...string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(path)
			if err != nil {
				return err
			}
			e := entry{Mode: fi.Mode(), ModTime: fi.ModTime().UnixNano()}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				e.Inode = st.Ino
			}
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				e.Content, err = os.Readlink(path)
			case fi.Mode().IsRegular():
				var b []byte
				b, err = os.ReadFile(path)
				e.Content = string(b)
			}
			out[path] = e
			return err
		})
		if !os.IsNotExist(err) {
			require.NoError(t, err)
		}
	}
	return out
}
