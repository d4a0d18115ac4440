package patch

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteErrorRestoresFiles fails the third file's write and checks the
// two written before it are back at their pre-images.
func TestWriteErrorRestoresFiles(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "a"), []byte("1\n"), 0o640))
	require.NoError(t, os.WriteFile(filepath.Join(root, "o"), []byte("old\n"), 0o600))
	p, err := New(Config{Root: func(string) string { return root }, LedgerDir: t.TempDir()})
	require.NoError(t, err)
	n := 0
	p.put = func(r *os.Root, tg *target) error {
		if n++; n == 3 {
			return errors.New("disk full")
		}
		return put(r, tg)
	}
	diff := "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-1\n+2\n--- /dev/null\n+++ b/d/n\n@@ -0,0 +1 @@\n+new\n--- a/o\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\n"
	args, err := json.Marshal(map[string]string{"patch": diff})
	require.NoError(t, err)
	_, err = p.Execute(context.Background(), executor.Call{OpID: "op_w", Workspace: "ws", Attempt: "a1", Args: args})
	require.Error(t, err)
	assert.Equal(t, events.CodeInternal, events.CodeOf(err), "a plain error: the op fails, nothing is in doubt")
	assert.Contains(t, err.Error(), "disk full")
	assert.Contains(t, err.Error(), "restored")

	b, err := os.ReadFile(filepath.Join(root, "a"))
	require.NoError(t, err)
	assert.Equal(t, "1\n", string(b))
	fi, err := os.Stat(filepath.Join(root, "a"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	assert.NoFileExists(t, filepath.Join(root, "d/n"))
	b, err = os.ReadFile(filepath.Join(root, "o"))
	require.NoError(t, err)
	assert.Equal(t, "old\n", string(b))

	// Recovery agrees: every file at its pre-image.
	rec, err := p.Recover(context.Background(), executor.Call{OpID: "op_w", Workspace: "ws"}, executor.Lost{Attempt: "a1", Own: true})
	require.NoError(t, err)
	assert.Equal(t, executor.Rerun, rec.Action)
}
