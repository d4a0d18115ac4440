package patch_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/consumers/tools/patch"
	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refuseEnv is a workspace with a few files, a directory outside the root
// and symlinks pointing out of and within the root.
func refuseEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s\n"), 0o644))
	e.write(t, "a.txt", "one\ntwo\nthree\n")
	e.write(t, "b.txt", "x\n")
	e.write(t, "sub/in.txt", "in\n")
	e.write(t, "multi.txt", "1\n2\n3\n4\n5\n6\n7\n8\n9\n")
	require.NoError(t, os.Symlink(outside, filepath.Join(e.root, "outdir")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(e.root, "outfile")))
	require.NoError(t, os.Symlink("sub", filepath.Join(e.root, "alias")))
	require.NoError(t, os.Symlink("sub/in.txt", filepath.Join(e.root, "alias.txt")))
	require.NoError(t, os.Symlink("/nonexistent/airlock", filepath.Join(e.root, "dangling")))
	return e, outside
}

// validHead modifies two files correctly; the refused file comes last.
const validHead = `--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
--- a/b.txt
+++ b/b.txt
@@ -1 +1 @@
-x
+y
`

// refused runs diff and checks its code, the message fragment, and that
// no file anywhere (root, ledger, outside) changed.
func refused(t *testing.T, diff string, code events.Code, fragment string) {
	t.Helper()
	e, outside := refuseEnv(t)
	before := snapshot(t, e.root, e.ledger, outside)
	_, _, err := e.run(t, "op_refused", diff)
	requireCode(t, err, code)
	assert.Contains(t, err.Error(), fragment)
	// The message is stored in the op's events, which keep no text of the
	// args: it names lines and files by their place, never a path.
	for _, name := range []string{"a.txt", "b.txt", "multi.txt", "in.txt", "missing.txt", "outdir", "outfile", "alias", "dangling", "secret"} {
		assert.NotContains(t, err.Error(), name)
	}
	assert.Equal(t, before, snapshot(t, e.root, e.ledger, outside), "nothing may be touched")
	ledgers, err := os.ReadDir(e.ledger)
	require.NoError(t, err)
	assert.Empty(t, ledgers)
	// Operands refuses the same patches with the same code, except
	// conflicts, which only applying finds.
	if code != events.CodePatchConflict {
		_, err = e.p.Operands(context.Background(), testWS, args(t, diff))
		requireCode(t, err, code)
	}
}

func TestMalformedPatch(t *testing.T) {
	tests := []struct {
		name, diff, fragment string
	}{
		{"garbage", "hello world\nthis is not a diff\n", "line 1:"},
		{"preamble before the diff", "Fix a bug\n\n" + validHead, "line 1:"},
		{"counts too small", "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n three\n", "line 7:"},
		{"counts too large at the end", "--- a/a.txt\n+++ b/a.txt\n@@ -1,4 +1,4 @@\n one\n-two\n+TWO\n three\n", "ends inside the hunk"},
		{"truncated hunk before the next file", "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\ndiff --git a/b.txt b/b.txt\n", "line 7: hunk at line 3 ends early"},
		{"more new lines than counted", "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-x\n+y\n+z\n", "line 6:"},
		{"bad hunk header", "--- a/b.txt\n+++ b/b.txt\n@@ -1,x +1 @@\n-x\n+y\n", "line 3: malformed hunk header"},
		{"hunk header without closing", "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1\n-x\n+y\n", "line 3: malformed hunk header"},
		{"zero start with lines", "--- a/b.txt\n+++ b/b.txt\n@@ -0,1 +1 @@\n-x\n+y\n", "line 3:"},
		{"combined diff", "--- a/b.txt\n+++ b/b.txt\n@@@ -1 -1 +1 @@@\n-x\n+y\n", "line 3:"},
		{"empty hunk", "--- a/b.txt\n+++ b/b.txt\n@@ -1,0 +1,0 @@\n", "line 3: empty hunk"},
		{"missing +++", "--- a/b.txt\n@@ -1 +1 @@\n-x\n+y\n", "line 2:"},
		{"no hunk", "--- a/b.txt\n+++ b/b.txt\n", "no hunk"},
		{"git modify without hunk", "diff --git a/b.txt b/b.txt\nindex 1..2 100644\n", "no hunks"},
		{"overlapping hunks", "--- a/multi.txt\n+++ b/multi.txt\n@@ -2,2 +2,2 @@\n 2\n-3\n+x\n@@ -3 +3 @@\n-3\n+y\n", "line 7: hunk overlaps"},
		{"new start disagrees", "--- a/multi.txt\n+++ b/multi.txt\n@@ -2,2 +2,3 @@\n 2\n+x\n 3\n@@ -6 +6 @@\n-6\n+y\n", "line 7: hunk new start 6"},
		{"file named twice", validHead + "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n", "named twice"},
		{"rename", "diff --git a/a.txt b/c.txt\nsimilarity index 100%\nrename from a.txt\nrename to c.txt\n", "line 1:"},
		{"rename headers with same name", "diff --git a/a.txt b/a.txt\nsimilarity index 90%\n", "renames and copies are refused"},
		{"copy", "diff --git a/b.txt b/b.txt\ncopy from a.txt\ncopy to b.txt\n", "renames and copies are refused"},
		{"mode change", "diff --git a/b.txt b/b.txt\nold mode 100644\nnew mode 100755\n", "line 2: mode changes are refused"},
		{"executable new file", "diff --git a/run.sh b/run.sh\nnew file mode 100755\n--- /dev/null\n+++ b/run.sh\n@@ -0,0 +1 @@\n+x\n", "line 2: new file mode"},
		{"symlink new file", "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n", "line 2: new file mode"},
		{"quoted git name", "diff --git \"a/b\\tc\" \"b/b\\tc\"\n", "line 1:"},
		{"quoted plain name", "--- \"a/b.txt\"\n+++ \"b/b.txt\"\n@@ -1 +1 @@\n-x\n+y\n", "line 1: quoted"},
		{"git name without prefix", "diff --git b.txt b.txt\n--- b.txt\n+++ b.txt\n@@ -1 +1 @@\n-x\n+y\n", "line 1:"},
		{"git --- without prefix", "diff --git a/b.txt b/b.txt\n--- b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-x\n+y\n", "line 2:"},
		{"git names disagree", "diff --git a/b.txt b/b.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\n", "line 2:"},
		{"git add without new file mode", "diff --git a/n b/n\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n", "line 2:"},
		{"both sides /dev/null", "--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+x\n", "line 1:"},
		{"names differ", "--- a/a.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-one\n+ONE\n", "line 1:"},
		{"add with old lines", "--- /dev/null\n+++ b/n\n@@ -1 +1 @@\n-x\n+y\n", "line 3: a new file"},
		{"delete keeping lines", "--- a/b.txt\n+++ /dev/null\n@@ -1 +1 @@\n-x\n+y\n", "line 3: a deleted file"},
		{"marker first in hunk", "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n\\ No newline at end of file\n-x\n+y\n", "line 4:"},
		{"line after marker", "--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n-x\n\\ No newline at end of file\n-z\n+y\n+z\n", "line 6:"},
		{"hunk after marker", "--- a/multi.txt\n+++ b/multi.txt\n@@ -1 +1 @@\n-1\n+x\n\\ No newline at end of file\n@@ -3 +3 @@\n-3\n+y\n", "line 7:"},
		{"diff command without file", "diff -u a b\nhello\n", "line 1:"},
		{"file and directory", "--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n--- /dev/null\n+++ b/n/m\n@@ -0,0 +1 @@\n+y\n", "the file at patch line 1 is also a directory of the file at patch line 5"},
		{"valid files then garbage", validHead + "garbage\n", "line 13:"},
		{"blank line between files", "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-x\n+y\n\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n", "line 6:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refused(t, tt.diff, events.CodeInvalidPatch, tt.fragment)
		})
	}
}

func TestBinaryPatch(t *testing.T) {
	tests := []struct {
		name, diff string
	}{
		{"git binary patch", "diff --git a/img.png b/img.png\nindex 1111111..2222222 100644\nGIT binary patch\nliteral 5\nMcmZ?wbhEHbhEHb\n\nliteral 0\nHcmV?d00001\n\n"},
		{"git binary files differ", "diff --git a/img.png b/img.png\nindex 1111111..2222222 100644\nBinary files a/img.png and b/img.png differ\n"},
		{"plain binary files differ", validHead + "Binary files a/img.png and b/img.png differ\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refused(t, tt.diff, events.CodeInvalidPatch, "binary patches are refused")
		})
	}
}

func TestPatchConflict(t *testing.T) {
	tests := []struct {
		name, diff, fragment string
	}{
		{"context mismatch in the second hunk of the last file", validHead + "--- a/multi.txt\n+++ b/multi.txt\n@@ -1,2 +1,2 @@\n-1\n+one\n 2\n@@ -5,2 +5,2 @@\n 5\n-7\n+seven\n", "the file at patch line 13: hunk 2 (line 19): line 6 differs"},
		{"removed line mismatch", "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-X\n+y\n", "the file at patch line 1: hunk 1 (line 3): line 1 differs"},
		{"hunk beyond the end", "--- a/b.txt\n+++ b/b.txt\n@@ -2 +2 @@\n-x\n+y\n", "the file at patch line 1: hunk 1 (line 3): file has 1 lines"},
		{"add onto an existing file", validHead + "--- /dev/null\n+++ b/sub/in.txt\n@@ -0,0 +1 @@\n+new\n", "the file at patch line 13: the patch adds it but it exists"},
		{"modify a missing file", validHead + "--- a/missing.txt\n+++ b/missing.txt\n@@ -1 +1 @@\n-x\n+y\n", "does not exist"},
		{"delete a missing file", validHead + "--- a/missing.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n", "does not exist"},
		{"delete leaving content", "--- a/multi.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-1\n-2\n", "content the deletion does not list"},
		{"target is a directory", validHead + "--- a/sub\n+++ b/sub\n@@ -1 +1 @@\n-x\n+y\n", "not a regular file"},
		{"parent is a file", validHead + "--- /dev/null\n+++ b/sub/in.txt/x\n@@ -0,0 +1 @@\n+y\n", "is not a directory"},
		{"old side has no newline but file does", "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+y\n", "line 1 differs"},
		{"new side without newline but the file goes on", "--- a/multi.txt\n+++ b/multi.txt\n@@ -1 +1 @@\n-1\n+x\n\\ No newline at end of file\n", "file goes on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refused(t, tt.diff, events.CodePatchConflict, tt.fragment)
		})
	}
}

func TestAppendAfterUnterminatedLineConflicts(t *testing.T) {
	e := newEnv(t)
	e.write(t, "f", "a")
	before := snapshot(t, e.root, e.ledger)
	_, _, err := e.run(t, "op_j", "--- a/f\n+++ b/f\n@@ -1,0 +2 @@\n+b\n")
	requireCode(t, err, events.CodePatchConflict)
	assert.Equal(t, before, snapshot(t, e.root, e.ledger))
}

func TestPathEscape(t *testing.T) {
	tests := []struct {
		name, tail, fragment string
	}{
		{"dot-dot", "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-x\n+y\n", "\"..\" component"},
		{"dot-dot add", "--- /dev/null\n+++ b/../x\n@@ -0,0 +1 @@\n+y\n", "\"..\" component"},
		{"absolute", "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root\n+evil\n", "absolute path"},
		{"absolute add", "--- /dev/null\n+++ /tmp/airlock-escape\n@@ -0,0 +1 @@\n+y\n", "absolute path"},
		{"git dot-dot", "diff --git a/../../x b/../../x\nnew file mode 100644\n--- /dev/null\n+++ b/../../x\n@@ -0,0 +1 @@\n+y\n", "\"..\" component"},
		{"a/../../x", "--- /dev/null\n+++ b/a/../../x\n@@ -0,0 +1 @@\n+y\n", "\"..\" component"},
		{"inner dot-dot", "--- /dev/null\n+++ b/sub/../../x\n@@ -0,0 +1 @@\n+y\n", "\"..\" component"},
		{"dot", "--- /dev/null\n+++ b/./x\n@@ -0,0 +1 @@\n+y\n", "\".\" component"},
		{"double slash", "--- /dev/null\n+++ b/sub//x\n@@ -0,0 +1 @@\n+y\n", "empty or"},
		{"trailing slash", "--- /dev/null\n+++ b/sub/\n@@ -0,0 +1 @@\n+y\n", "empty or"},
		{"empty name", "--- /dev/null\n+++ b/\n@@ -0,0 +1 @@\n+y\n", "empty path"},
		{"NUL", "--- /dev/null\n+++ b/x\x00y\n@@ -0,0 +1 @@\n+y\n", "control character"},
		{"carriage return", "--- /dev/null\n+++ b/x\r\n@@ -0,0 +1 @@\n+y\n", "control character"},
		{"symlink dir pointing outside, add", "--- /dev/null\n+++ b/outdir/new\n@@ -0,0 +1 @@\n+y\n", "component 1 of 2 of its path is a symlink"},
		{"symlink dir pointing outside, modify", "--- a/outdir/secret\n+++ b/outdir/secret\n@@ -1 +1 @@\n-s\n+evil\n", "the file at patch line 13: component 1 of 2 of its path is a symlink"},
		{"symlink file pointing outside", "--- a/outfile\n+++ b/outfile\n@@ -1 +1 @@\n-s\n+evil\n", "component 1 of 1 of its path is a symlink"},
		{"symlink file pointing outside, delete", "--- a/outfile\n+++ /dev/null\n@@ -1 +0,0 @@\n-s\n", "is a symlink"},
		{"symlink dir pointing inside", "--- a/alias/in.txt\n+++ b/alias/in.txt\n@@ -1 +1 @@\n-in\n+x\n", "component 1 of 2 of its path is a symlink"},
		{"symlink file pointing inside", "--- a/alias.txt\n+++ b/alias.txt\n@@ -1 +1 @@\n-in\n+x\n", "is a symlink"},
		{"dangling symlink", "--- /dev/null\n+++ b/dangling\n@@ -0,0 +1 @@\n+y\n", "is a symlink"},
		{"conflict first (not a file), escape last", "--- a/sub\n+++ b/sub\n@@ -1 +1 @@\n-x\n+y\n--- a/outdir/secret\n+++ b/outdir/secret\n@@ -1 +1 @@\n-s\n+evil\n", "is a symlink"},
		{"conflict first, escape last", "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-WRONG\n+y\n--- a/outfile\n+++ b/outfile\n@@ -1 +1 @@\n-s\n+evil\n", "is a symlink"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diff := tt.tail
			if !strings.HasPrefix(tt.name, "conflict first") {
				diff = validHead + tt.tail // the escaping file is the last of several
			}
			refused(t, diff, events.CodePathEscape, tt.fragment)
		})
	}
}

func TestLedgerInsideRootRefused(t *testing.T) {
	root := t.TempDir()
	p, err := patch.New(patch.Config{Root: func(string) string { return root }, LedgerDir: filepath.Join(root, ".airlock", "ledger")})
	require.NoError(t, err)
	_, err = p.Execute(context.Background(), call(t, "op_x", "--- /dev/null\n+++ b/.airlock/ledger/op_y.json\n@@ -0,0 +1 @@\n+{}\n"))
	requireCode(t, err, events.CodePathEscape)
	_, err = p.Execute(context.Background(), call(t, "op_x", "--- /dev/null\n+++ b/.airlock/other\n@@ -0,0 +1 @@\n+{}\n"))
	require.NoError(t, err)
}
