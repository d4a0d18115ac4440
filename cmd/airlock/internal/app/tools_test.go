package app_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/ledger"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bad tool args get their code when the op is decided, before anything
// runs or is held, and nothing is half-applied.
func TestToolBadInputDeniedBeforeAnythingRuns(t *testing.T) {
	root, probe, data := t.TempDir(), filepath.Join(t.TempDir(), "probe"), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("a\n"), 0o644))
	a := apptest.StartApp(t, app.Config{DataDir: data, Policy: policy.Spec{
		Workspaces: map[string]policy.WorkspaceSpec{"tools": {Mode: "auto", Root: root}},
	}})
	c, _ := apptest.Client(t, a.ClientURL())
	cases := []struct {
		name, tool, args string
		code             events.Code
	}{
		{"argv not a list", "exec", `{"argv":"ls"}`, events.CodeInvalidArgs},
		{"argv with a NUL byte", "exec", `{"argv":["/bin/sh","-c","touch ` + probe + `\u0000"]}`, events.CodeInvalidArgs},
		{"unknown field", "exec", `{"argv":["/bin/true"],"shell":true}`, events.CodeInvalidArgs},
		{"escalation inside sh -c", "exec", `{"argv":["/bin/sh","-c","touch ` + probe + ` && sudo true"]}`, events.CodePrivilegeEscalation},
		{"malformed diff", "apply_patch", `{"patch":"--- a/a.txt\n+++ b/a.txt\n@@ -1,5 +1 @@\n-a\n+b\n"}`, events.CodeInvalidPatch},
		{"binary patch", "apply_patch", `{"patch":"diff --git a/a.txt b/a.txt\nGIT binary patch\nliteral 1\nAcmZ\n"}`, events.CodeInvalidPatch},
		{"path escape", "apply_patch", `{"patch":"--- a/../outside.txt\n+++ b/../outside.txt\n@@ -0,0 +1 @@\n+x\n"}`, events.CodePathEscape},
		{"patch of the wrong shape", "apply_patch", `{"diff":"x"}`, events.CodeInvalidArgs},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.Submit(ctxT(t), events.Request{Workspace: "tools", Agent: "agent", Tool: tc.tool, Args: json.RawMessage(tc.args)})
			if err != nil {
				// Some shapes are refused by the client before sending.
				assert.Equal(t, tc.code, events.CodeOf(err))
				return
			}
			assert.Equal(t, events.StateDenied, out.State)
			assert.Equal(t, tc.code, out.Code, out.Message)
		})
	}
	_, err := os.Stat(probe)
	assert.True(t, os.IsNotExist(err), "nothing ran")
	b, err := os.ReadFile(filepath.Join(root, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "a\n", string(b), "nothing applied")

	// Huge output is capped, and the op still completes with the flag set.
	out, err := c.Submit(ctxT(t), events.Request{Workspace: "tools", Agent: "agent", Tool: "exec", Args: json.RawMessage(`{"argv":["/bin/sh","-c","head -c 3000000 /dev/zero | tr '\\0' x"]}`)})
	require.NoError(t, err)
	require.Equal(t, events.StateCompleted, out.State, out.Message)
	var res struct {
		Stdout          string `json:"stdout"`
		StdoutTruncated bool   `json:"stdout_truncated"`
		ExitCode        int    `json:"exit_code"`
	}
	require.NoError(t, json.Unmarshal(out.Result, &res))
	assert.True(t, res.StdoutTruncated)
	assert.Equal(t, 0, res.ExitCode)
	assert.LessOrEqual(t, len(out.Result), events.MaxResultBytes)

	// Its ledger went once the op's outcome was stored.
	require.Eventually(t, func() bool {
		kept, err := ledger.ReadKept(filepath.Join(data, "ledger", "exec"))
		return err == nil && !slices.Contains(kept, out.OpID)
	}, 5*time.Second, 10*time.Millisecond, "the exec ledger of a terminal op is removed")
}
