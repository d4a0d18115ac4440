package patch_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/consumers/executor/conformance"
	"github.com/airlock-dev/airlock/consumers/tools/patch"
	"github.com/airlock-dev/airlock/events"
)

// Limits of the conformance fixture, small enough to reach in a test.
const (
	confMaxFiles     = 64
	confMaxFileBytes = 64 << 10
)

// apply_patch's effect is a file of the call's own, <op id>.txt, moved
// from its pre-image "v0" to its post-image "v1". A second attempt of a
// completed op finds the file at its post-image and is refused with
// PATCH_CONFLICT. It has no slow call: a patch does not wait on anything.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New:    newConformanceFixture,
		Repeat: conformance.RepeatRefused,
		// The started event's evidence and the workspace's files judge an
		// attempt on any instance that serves the workspace.
		RecoversElsewhere: true,
		Bad:               patchBad(),
		Limits:            patchLimits(),
	})
}

func newConformanceFixture(t *testing.T) conformance.Fixture {
	root := t.TempDir()
	p, err := patch.New(patch.Config{
		LedgerDir: filepath.Join(t.TempDir(), "ledger"),
		Root: func(ws string) string {
			switch ws {
			case testWS:
				return root
			case "gone":
				return filepath.Join(root, "missing")
			}
			return ""
		},
		MaxFiles:     confMaxFiles,
		MaxFileBytes: confMaxFileBytes,
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "other.txt"), []byte("a\n"), 0o644))
	require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(root, "out")))
	return conformance.Fixture{
		Executor: p,
		Call: func(int) executor.Call {
			op := conformance.OpID()
			require.NoError(t, os.WriteFile(filepath.Join(root, op+".txt"), []byte("v0\n"), 0o644))
			return executor.Call{OpID: op, Workspace: testWS, Agent: "bot", Args: canonArgs(modify(op+".txt", "v0", "v1"))}
		},
		Effects: func(c executor.Call) int {
			b, err := os.ReadFile(filepath.Join(root, c.OpID+".txt"))
			if errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s.txt is gone", c.OpID)
				return -1
			}
			require.NoError(t, err)
			switch string(b) {
			case "v0\n":
				return 0
			case "v1\n":
				return 1
			}
			t.Errorf("%s.txt holds neither its pre- nor its post-image: %q", c.OpID, b)
			return -1
		},
	}
}

func modify(name, old, new string) string {
	return fmt.Sprintf("--- a/%s\n+++ b/%s\n@@ -1 +1 @@\n-%s\n+%s\n", name, name, old, new)
}

func add(name, line string) string {
	return fmt.Sprintf("--- /dev/null\n+++ b/%s\n@@ -0,0 +1 @@\n+%s\n", name, line)
}

// withPatch derives a call from the fixture's valid one: its patch text
// changed by edit (the valid file first, so a half-applied patch shows).
func withPatch(edit func(valid string) string) func(executor.Call) executor.Call {
	return func(c executor.Call) executor.Call {
		var a struct{ Patch string }
		if err := json.Unmarshal(c.Args, &a); err != nil {
			panic(err)
		}
		c.Args = canonArgs(edit(a.Patch))
		return c
	}
}

// canonArgs is the canonical JSON of the args {"patch": diff}, as the
// runner hands them over (json.Marshal would escape < > &).
func canonArgs(diff string) json.RawMessage {
	b, err := json.Marshal(map[string]string{"patch": diff})
	if err == nil {
		b, err = events.Canonical(b)
	}
	if err != nil {
		panic(err)
	}
	return b
}

// then appends more of a diff after the valid one.
func then(more string) func(executor.Call) executor.Call {
	return withPatch(func(valid string) string { return valid + more })
}

func patchBad() []conformance.Bad {
	var tooMany strings.Builder
	for i := range confMaxFiles {
		tooMany.WriteString(add(fmt.Sprintf("many/%d.txt", i), "x"))
	}
	return []conformance.Bad{
		{Name: "dot-dot path", Call: then(add("../escape.txt", "x")), Code: events.CodePathEscape},
		{Name: "absolute path", Call: then("--- /dev/null\n+++ /tmp/airlock-conformance-escape.txt\n@@ -0,0 +1 @@\n+x\n"), Code: events.CodePathEscape},
		{Name: "path through a symlink", Call: then(add("out/x.txt", "x")), Code: events.CodePathEscape},
		{Name: "conflict in a later file", Call: then(modify("other.txt", "b", "c")), Code: events.CodePatchConflict},
		{Name: "adding a file that exists", Call: then(add("other.txt", "x")), Code: events.CodePatchConflict},
		{Name: "changing a missing file", Call: then(modify("missing.txt", "a", "b")), Code: events.CodePatchConflict},
		{Name: "wrong hunk counts", Call: then("--- a/other.txt\n+++ b/other.txt\n@@ -1,2 +1,2 @@\n-a\n+b\n"), Code: events.CodeInvalidPatch},
		{Name: "binary patch", Call: then("diff --git a/bin b/bin\nGIT binary patch\nliteral 1\nIcmZ?l0000C00001\n\n"), Code: events.CodeInvalidPatch},
		{Name: "rename", Call: then("diff --git a/other.txt b/renamed.txt\nsimilarity index 100%\nrename from other.txt\nrename to renamed.txt\n"), Code: events.CodeInvalidPatch},
		{Name: "mode change", Call: then("diff --git a/other.txt b/other.txt\nold mode 100644\nnew mode 100755\n"), Code: events.CodeInvalidPatch},
		{Name: "text before the first file", Call: withPatch(func(v string) string { return "Fix it.\n" + v }), Code: events.CodeInvalidPatch},
		{Name: "not a diff", Call: withPatch(func(string) string { return "hello\n" }), Code: events.CodeInvalidPatch},
		{Name: "over MaxFiles", Call: then(tooMany.String()), Code: events.CodeInvalidPatch},
		{Name: "file over MaxFileBytes", Call: then(add("big.txt", strings.Repeat("x", confMaxFileBytes))), Code: events.CodeInvalidPatch},
		{Name: "patch over MaxPatchBytes", Call: withPatch(func(v string) string { return v + strings.Repeat("\n", patch.MaxPatchBytes) }), Code: events.CodeInvalidArgs},
		{Name: "patch a number", Call: conformance.Args(`{"patch":1}`), Code: events.CodeInvalidArgs},
		{Name: "patch null", Call: conformance.Args(`{"patch":null}`), Code: events.CodeInvalidArgs},
		{Name: "patch empty", Call: conformance.Args(`{"patch":""}`), Code: events.CodeInvalidArgs},
		{Name: "no patch", Call: conformance.Args(`{}`), Code: events.CodeInvalidArgs},
		{Name: "field in other case", Call: conformance.Args(`{"Patch":"--- a/x\n+++ b/x\n"}`), Code: events.CodeInvalidArgs},
		{Name: "args an array", Call: conformance.Args(`["patch"]`), Code: events.CodeInvalidArgs},
		{Name: "another field", Call: func(c executor.Call) executor.Call {
			c.Args = json.RawMessage(strings.Replace(string(c.Args), `{"patch":`, `{"strip":1,"patch":`, 1))
			return c
		}, Code: events.CodeInvalidArgs},
		{Name: "workspace without a root", Call: func(c executor.Call) executor.Call { c.Workspace = "none"; return c }, Code: events.CodeNoWorkspaceRoot},
		{Name: "workspace root missing", Call: func(c executor.Call) executor.Call { c.Workspace = "gone"; return c }, Code: events.CodeNoWorkspaceRoot},
	}
}

func patchLimits() []conformance.Limit {
	files := func(t *testing.T, raw json.RawMessage, err error, n int) {
		t.Helper()
		require.NoError(t, err)
		var r patch.Result
		require.NoError(t, json.Unmarshal(raw, &r))
		assert.Len(t, r.Files, n)
	}
	var many strings.Builder
	for i := range confMaxFiles - 1 {
		many.WriteString(add(fmt.Sprintf("many/%02d.txt", i), "x"))
	}
	// 30 files 14 directories deep, every name 250 bytes of '<': about
	// 105 KiB of args (canonical JSON keeps '<' as is), a result of about
	// 640 KiB if each '<' is escaped.
	var escaped strings.Builder
	dir := strings.TrimSuffix(strings.Repeat(strings.Repeat("<", 250)+"/", 14), "/")
	for i := range 30 {
		escaped.WriteString(add(fmt.Sprintf("%s/%02d", dir, i), "x"))
	}
	return []conformance.Limit{
		{
			Name:  "MaxFiles files",
			Call:  then(many.String()),
			Check: func(t *testing.T, raw json.RawMessage, err error) { files(t, raw, err, confMaxFiles) },
		},
		{
			Name: "result with JSON-escaped paths",
			Call: func(c executor.Call) executor.Call {
				c = then(escaped.String())(c)
				if len(c.Args) > events.MaxArgsBytes {
					panic(fmt.Sprintf("args of %d bytes would not pass the gate", len(c.Args)))
				}
				return c
			},
			Check: func(t *testing.T, raw json.RawMessage, err error) { files(t, raw, err, 31) },
		},
	}
}
