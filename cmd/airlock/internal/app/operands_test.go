package app_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A file the call touches that changes between the hold and the grant
// fails the op with OPERANDS_CHANGED, and nothing runs: what the approver
// approved is what would have run.
func TestOperandChangeBetweenHoldAndGrant(t *testing.T) {
	root, marks := t.TempDir(), t.TempDir()
	marker := filepath.Join(marks, "ran")
	script := filepath.Join(root, "deploy.sh")
	require.NoError(t, os.WriteFile(script, []byte("echo run >> "+marker+"\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "notes.txt"), []byte("a\n"), 0o644))
	spec := policy.Spec{
		Tools:      map[string]string{"exec": "exec", "apply_patch": "write"},
		Workspaces: map[string]policy.WorkspaceSpec{"review": {Mode: "confirm", Root: root}},
	}
	a, counter := holdsApp(t, app.Config{Policy: spec})
	c := agentClient(t, a)
	ap := approverAs(t, a, "approver")

	cases := []struct {
		name   string
		req    events.Request
		change func()
	}{
		{"exec of a script", events.Request{Workspace: "review", Agent: "agent", Tool: "exec", Args: json.RawMessage(`{"argv":["/bin/sh","deploy.sh"]}`)},
			func() { require.NoError(t, os.WriteFile(script, []byte("echo changed >> "+marker+"\n"), 0o755)) }},
		{"patch of a file", events.Request{Workspace: "review", Agent: "agent", Tool: "apply_patch", Args: json.RawMessage(`{"patch":"--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-a\n+b\n"}`)},
			func() {
				require.NoError(t, os.WriteFile(filepath.Join(root, "notes.txt"), []byte("a\nsneaky\n"), 0o644))
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			held := submitHeld(t, c, counter, tc.req)
			waitHeldInProjection(t, a, held.OpID)
			op, err := a.Store.Op(held.OpID)
			require.NoError(t, err)
			require.NotEmpty(t, op.Operands, "the hold covers the files")
			for _, h := range op.Operands {
				assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, h)
			}
			tc.change()
			_, err = ap.Grant(ctxT(t), held.HoldID, held.ArgsDigest, "approved as it was")
			require.NoError(t, err)
			got := waitTerminal(t, a, held.OpID)
			assert.Equal(t, events.StateFailed, got.State)
			assert.Equal(t, events.CodeOperandsChanged, got.ErrorCode, got.Error)
		})
	}
	_, err := os.Stat(marker)
	assert.True(t, os.IsNotExist(err), "the changed script never ran")
	b, err := os.ReadFile(filepath.Join(root, "notes.txt"))
	require.NoError(t, err)
	assert.Equal(t, "a\nsneaky\n", string(b), "the patch never applied")
}
