package patch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/consumers/tools/patch"
	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestToolAndClass(t *testing.T) {
	e := newEnv(t)
	assert.Equal(t, "apply_patch", e.p.Tool())
	assert.Equal(t, events.ClassWrite, e.p.Class())
}

func TestConfigValidate(t *testing.T) {
	_, err := patch.New(patch.Config{LedgerDir: t.TempDir()})
	require.Error(t, err)
	_, err = patch.New(patch.Config{Root: func(string) string { return "" }})
	require.Error(t, err)
	cfg := patch.Config{Root: func(string) string { return "" }, LedgerDir: t.TempDir()}
	cfg.EnsureDefaults()
	require.NoError(t, cfg.Validate())
	assert.Equal(t, patch.DefaultMaxFiles, cfg.MaxFiles)
	assert.Equal(t, int64(patch.DefaultMaxFileBytes), cfg.MaxFileBytes)
	assert.NotNil(t, cfg.Logger)
}

func TestExecuteModify(t *testing.T) {
	e := newEnv(t)
	e.write(t, "a.txt", "one\ntwo\nthree\n")
	require.NoError(t, os.Chmod(filepath.Join(e.root, "a.txt"), 0o600))
	res, raw, err := e.run(t, "op_mod", `diff --git a/a.txt b/a.txt
index 1111111..2222222 100644
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
`)
	require.NoError(t, err)
	assert.Equal(t, "one\nTWO\nthree\n", e.read(t, "a.txt"))
	fi, err := os.Stat(filepath.Join(e.root, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "mode of an existing file is kept")
	want := patch.Result{Files: []patch.File{{Path: "a.txt", Action: "modify", Pre: sha("one\ntwo\nthree\n"), Post: sha("one\nTWO\nthree\n")}}}
	assert.Equal(t, want, res)
	assert.JSONEq(t, fmt.Sprintf(`{"files":[{"path":"a.txt","action":"modify","pre":%q,"post":%q}]}`,
		sha("one\ntwo\nthree\n"), sha("one\nTWO\nthree\n")), string(raw))

	// The ledger holds op, attempt and the same files.
	b, err := os.ReadFile(filepath.Join(e.ledger, "op_mod.json"))
	require.NoError(t, err)
	var led struct {
		Op, Attempt string
		Files       []patch.File
	}
	require.NoError(t, json.Unmarshal(b, &led))
	assert.Equal(t, "op_mod", led.Op)
	assert.Equal(t, "att-1", led.Attempt)
	assert.Equal(t, want.Files, led.Files)

	// No temp file is left behind.
	ents, err := os.ReadDir(e.root)
	require.NoError(t, err)
	assert.Len(t, ents, 1)
}

func TestExecuteAdd(t *testing.T) {
	e := newEnv(t)
	res, _, err := e.run(t, "op_add", `diff --git a/dir/sub/new.go b/dir/sub/new.go
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/dir/sub/new.go
@@ -0,0 +1,2 @@
+package sub
+// new
`)
	require.NoError(t, err)
	assert.Equal(t, "package sub\n// new\n", e.read(t, "dir/sub/new.go"))
	fi, err := os.Stat(filepath.Join(e.root, "dir/sub/new.go"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	di, err := os.Stat(filepath.Join(e.root, "dir/sub"))
	require.NoError(t, err)
	assert.True(t, di.IsDir())
	assert.Equal(t, []patch.File{{Path: "dir/sub/new.go", Action: "add", Pre: "absent", Post: sha("package sub\n// new\n")}}, res.Files)
}

func TestExecuteDelete(t *testing.T) {
	e := newEnv(t)
	e.write(t, "gone.txt", "x\ny\n")
	e.write(t, "keep.txt", "k\n")
	res, _, err := e.run(t, "op_del", `diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 4444444..0000000
--- a/gone.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-x
-y
`)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(e.root, "gone.txt"))
	assert.True(t, os.IsNotExist(err))
	assert.Equal(t, "k\n", e.read(t, "keep.txt"))
	assert.Equal(t, []patch.File{{Path: "gone.txt", Action: "delete", Pre: sha("x\ny\n"), Post: "absent"}}, res.Files)
}

func TestExecuteMultiFileAndMultiHunk(t *testing.T) {
	e := newEnv(t)
	var lines []string
	for i := 1; i <= 20; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	e.write(t, "big.txt", strings.Join(lines, "\n")+"\n")
	e.write(t, "old.txt", "bye\n")
	res, _, err := e.run(t, "op_multi", `--- a/big.txt
+++ b/big.txt
@@ -2,3 +2,4 @@
 line 2
-line 3
+line three
+line 3.5
 line 4
@@ -15,3 +16,2 @@ section heading
 line 15
-line 16
 line 17
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
`)
	require.NoError(t, err)
	want := strings.Join(lines, "\n") + "\n"
	want = strings.Replace(want, "line 3\n", "line three\nline 3.5\n", 1)
	want = strings.Replace(want, "line 16\n", "", 1)
	assert.Equal(t, want, e.read(t, "big.txt"))
	assert.Equal(t, "hello\n", e.read(t, "new.txt"))
	require.Len(t, res.Files, 3)
	assert.Equal(t, []string{"modify", "add", "delete"}, []string{res.Files[0].Action, res.Files[1].Action, res.Files[2].Action})
}

func TestExecuteNoNewlineAtEOF(t *testing.T) {
	tests := []struct {
		name, pre, diff, post string
	}{
		{"add newline", "a\nb", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n", "a\nb\n"},
		{"remove newline", "a\nb\n", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n", "a\nb"},
		{"change last line without newline", "a\nb", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n", "a\nc"},
		{"context without newline", "a\nb", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n\\ No newline at end of file\n", "A\nb"},
		{"append after unterminated line", "a", "--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n-a\n\\ No newline at end of file\n+a\n+b\n", "a\nb\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.write(t, "f", tt.pre)
			res, _, err := e.run(t, "op_eol", tt.diff)
			require.NoError(t, err)
			assert.Equal(t, tt.post, e.read(t, "f"))
			assert.Equal(t, sha(tt.post), res.Files[0].Post)
		})
	}
}

// absentFile marks a file that must not exist.
const absentFile = "\x00absent"

func TestExecuteAcceptedForms(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // before
		diff  string
		after map[string]string // "" means absent
	}{
		{"plain without prefixes and with timestamps", map[string]string{"f.txt": "a\n"},
			"--- f.txt\t2024-01-01 00:00:00.000000000 +0000\n+++ f.txt\t2024-01-02 00:00:00.000000000 +0000\n@@ -1 +1 @@\n-a\n+b\n",
			map[string]string{"f.txt": "b\n"}},
		{"diff -u command line", map[string]string{"d/f": "a\n"},
			"diff -u a/d/f b/d/f\n--- a/d/f\n+++ b/d/f\n@@ -1 +1 @@\n-a\n+b\n",
			map[string]string{"d/f": "b\n"}},
		{"git empty new file", nil,
			"diff --git a/empty b/empty\nnew file mode 100644\nindex 0000000..e69de29\n",
			map[string]string{"empty": ""}},
		{"git delete of empty file then another file", map[string]string{"empty": "", "x": "1\n"},
			"diff --git a/empty b/empty\ndeleted file mode 100644\nindex e69de29..0000000\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-1\n+2\n",
			map[string]string{"empty": absentFile, "x": "2\n"}},
		{"name with spaces", map[string]string{"my file.txt": "a\n"},
			"diff --git a/my file.txt b/my file.txt\n--- a/my file.txt\t\n+++ b/my file.txt\t\n@@ -1 +1 @@\n-a\n+b\n",
			map[string]string{"my file.txt": "b\n"}},
		{"blank context line without its space", map[string]string{"f": "a\n\nb\n"},
			"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n",
			map[string]string{"f": "a\n\nc\n"}},
		{"zero-context hunks", map[string]string{"f": "1\n2\n3\n4\n5\n"},
			"--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+0\n@@ -2 +2,0 @@\n-2\n@@ -4,0 +5,2 @@\n+4a\n+4b\n",
			map[string]string{"f": "0\n1\n3\n4\n4a\n4b\n5\n"}},
		{"crlf content", map[string]string{"w.txt": "a\r\nb\r\n"},
			"--- a/w.txt\n+++ b/w.txt\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n",
			map[string]string{"w.txt": "a\r\nc\r\n"}},
		{"trailing blank lines", map[string]string{"f": "a\n"},
			"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n\n\n",
			map[string]string{"f": "b\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			for n, c := range tt.files {
				e.write(t, n, c)
			}
			_, _, err := e.run(t, "op_form", tt.diff)
			require.NoError(t, err)
			for n, c := range tt.after {
				if c == absentFile {
					assert.NoFileExists(t, filepath.Join(e.root, n))
					continue
				}
				assert.Equal(t, c, e.read(t, n), n)
			}
		})
	}
}

func TestExecuteCancelledBeforeWriting(t *testing.T) {
	e := newEnv(t)
	e.write(t, "a", "1\n")
	before := snapshot(t, e.root, e.ledger)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.p.Execute(ctx, call(t, "op_c", "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-1\n+2\n"))
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, before, snapshot(t, e.root, e.ledger))
}

func TestNoWorkspaceRoot(t *testing.T) {
	e := newEnv(t)
	c := call(t, "op_r", "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-1\n+2\n")
	c.Workspace = "other"
	_, err := e.p.Execute(context.Background(), c)
	requireCode(t, err, events.CodeNoWorkspaceRoot)
	_, err = e.p.Operands(context.Background(), "other", c.Args)
	requireCode(t, err, events.CodeNoWorkspaceRoot)

	gone := newEnv(t, func(c *patch.Config) { c.Root = func(string) string { return "/nonexistent/airlock/root" } })
	_, err = gone.p.Execute(context.Background(), call(t, "op_r", "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-1\n+2\n"))
	requireCode(t, err, events.CodeNoWorkspaceRoot)
}

func TestInvalidArgs(t *testing.T) {
	ok := "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-1\n+2\n"
	huge, err := json.Marshal(map[string]string{"patch": ok + strings.Repeat("x", patch.MaxPatchBytes)})
	require.NoError(t, err)
	tests := []struct {
		name string
		args string
	}{
		{"empty object", `{}`},
		{"null", `null`},
		{"array", `[]`},
		{"string", `"patch"`},
		{"number patch", `{"patch":1}`},
		{"null patch", `{"patch":null}`},
		{"empty patch", `{"patch":""}`},
		{"unknown field", `{"patch":"x","strip":1}`},
		{"wrong case", `{"Patch":"x"}`},
		{"trailing data", `{"patch":"x"} {}`},
		{"not json", `{"patch":`},
		{"over 1 MiB", string(huge)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.write(t, "a", "1\n")
			before := snapshot(t, e.root, e.ledger)
			c := call(t, "op_a", ok)
			c.Args = json.RawMessage(tt.args)
			_, err := e.p.Execute(context.Background(), c)
			requireCode(t, err, events.CodeInvalidArgs)
			_, err = e.p.Operands(context.Background(), testWS, c.Args)
			requireCode(t, err, events.CodeInvalidArgs)
			assert.Equal(t, before, snapshot(t, e.root, e.ledger))
		})
	}
}

func TestLimits(t *testing.T) {
	t.Run("max files", func(t *testing.T) {
		e := newEnv(t, func(c *patch.Config) { c.MaxFiles = 2 })
		var b strings.Builder
		for i := range 3 {
			fmt.Fprintf(&b, "--- /dev/null\n+++ b/f%d\n@@ -0,0 +1 @@\n+x\n", i)
		}
		before := snapshot(t, e.root, e.ledger)
		_, _, err := e.run(t, "op_l", b.String())
		requireCode(t, err, events.CodeInvalidPatch)
		assert.Contains(t, err.Error(), "3 files")
		assert.Equal(t, before, snapshot(t, e.root, e.ledger))
	})
	t.Run("post-image too large", func(t *testing.T) {
		e := newEnv(t, func(c *patch.Config) { c.MaxFileBytes = 10 })
		e.write(t, "ok", "1\n")
		before := snapshot(t, e.root, e.ledger)
		_, _, err := e.run(t, "op_l", "--- a/ok\n+++ b/ok\n@@ -1 +1 @@\n-1\n+1\n--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+0123456789\n+x\n")
		requireCode(t, err, events.CodeInvalidPatch)
		assert.Contains(t, err.Error(), "over the limit")
		assert.Equal(t, before, snapshot(t, e.root, e.ledger))
	})
	t.Run("pre-image too large", func(t *testing.T) {
		e := newEnv(t, func(c *patch.Config) { c.MaxFileBytes = 10 })
		e.write(t, "big", "0123456789\nx\n")
		before := snapshot(t, e.root, e.ledger)
		_, _, err := e.run(t, "op_l", "--- a/big\n+++ b/big\n@@ -2 +2 @@\n-x\n+y\n")
		requireCode(t, err, events.CodeInvalidPatch)
		assert.Equal(t, before, snapshot(t, e.root, e.ledger))
	})
	t.Run("within limits", func(t *testing.T) {
		e := newEnv(t, func(c *patch.Config) { c.MaxFiles = 2; c.MaxFileBytes = 4 })
		_, _, err := e.run(t, "op_l", "--- /dev/null\n+++ b/a\n@@ -0,0 +1,2 @@\n+1\n+2\n--- /dev/null\n+++ b/b\n@@ -0,0 +1 @@\n+3\n")
		require.NoError(t, err)
	})
}

func TestConcurrentPatches(t *testing.T) {
	e := newEnv(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		e.write(t, fmt.Sprintf("f%d", i), "0\n")
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := call(t, fmt.Sprintf("op_%d", i), fmt.Sprintf("--- a/f%d\n+++ b/f%d\n@@ -1 +1 @@\n-0\n+%d\n", i, i, i))
			_, errs[i] = e.p.Execute(context.Background(), c)
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		assert.Equal(t, fmt.Sprintf("%d\n", i), e.read(t, fmt.Sprintf("f%d", i)))
	}
}
