package patch

import (
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseHunkHeader(t *testing.T) {
	tests := []struct {
		name, in                           string
		ok                                 bool
		oldStart, oldLen, newStart, newLen int
	}{
		{"full", "@@ -1,3 +1,4 @@", true, 1, 3, 1, 4},
		{"default lengths", "@@ -7 +8 @@", true, 7, 1, 8, 1},
		{"section", "@@ -1,2 +1,2 @@ func main() {", true, 1, 2, 1, 2},
		{"empty sides", "@@ -0,0 +1 @@", true, 0, 0, 1, 1},
		{"insertion after line", "@@ -5,0 +6,2 @@", true, 5, 0, 6, 2},
		{"no space after", "@@ -1 +1 @@x", false, 0, 0, 0, 0},
		{"sign", "@@ -+1 +1 @@", false, 0, 0, 0, 0},
		{"leading zero", "@@ -01 +1 @@", false, 0, 0, 0, 0},
		{"huge", "@@ -1234567890 +1 @@", false, 0, 0, 0, 0},
		{"zero start with lines", "@@ -0,2 +1 @@", false, 0, 0, 0, 0},
		{"combined", "@@@ -1 -1 +1 @@@", false, 0, 0, 0, 0},
		{"missing new", "@@ -1 @@", false, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := parseHunkHeader(tt.in)
			require.Equal(t, tt.ok, ok)
			if ok {
				assert.Equal(t, []int{tt.oldStart, tt.oldLen, tt.newStart, tt.newLen}, []int{h.oldStart, h.oldLen, h.newStart, h.newLen})
			}
		})
	}
}

func TestGitName(t *testing.T) {
	tests := []struct{ in, name string }{
		{"a/x b/x", "x"},
		{"a/dir/my file b/dir/my file", "dir/my file"},
		{"a/x b/y", ""},
		{"x x", ""},
		{`"a/x" "b/x"`, ""},
		{"a/ b/", ""},
		{"a/x  b/x", ""},
	}
	for _, tt := range tests {
		name, ok := gitName(tt.in)
		assert.Equal(t, tt.name != "", ok, tt.in)
		assert.Equal(t, tt.name, name, tt.in)
	}
}

func TestParseKeepsLinesExactly(t *testing.T) {
	files, err := parse("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\r\n-b\n\\ No newline at end of file\n+c\n")
	require.NoError(t, err)
	require.Len(t, files, 1)
	h := files[0].hunks[0]
	assert.Equal(t, []string{"a\r\n", "b"}, h.old)
	assert.Equal(t, []string{"a\r\n", "c\n"}, h.new)
	assert.True(t, h.oldNoEOL)
	assert.False(t, h.newNoEOL)
}

// FuzzParse feeds arbitrary text to the parser and, when it parses, to
// apply: neither may panic, and every error carries the right code.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
		"diff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n",
		"diff --git a/e b/e\ndeleted file mode 100644\nindex e69de29..0000000\n",
		"--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n",
		"--- f\n+++ f\n@@ -0,0 +1 @@\n+0\n@@ -2 +2,0 @@\n-2\n",
		"diff --git a/x b/x\nGIT binary patch\nliteral 0\n",
		"@@ -1 +1 @@\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		files, err := parse(text)
		if err != nil {
			if c := events.CodeOf(err); c != events.CodeInvalidPatch {
				t.Fatalf("parse error with code %s: %v", c, err)
			}
			return
		}
		if len(files) == 0 {
			t.Fatal("parse returned no files and no error")
		}
		for _, fd := range files {
			for _, h := range fd.hunks {
				if len(h.old) != h.oldLen || len(h.new) != h.newLen {
					t.Fatalf("hunk at line %d holds %d/%d lines, header says %d/%d", h.line, len(h.old), len(h.new), h.oldLen, h.newLen)
				}
			}
			for _, pre := range [][]byte{nil, []byte(text), []byte(preFor(fd))} {
				if _, err := apply(fd, pre); err != nil && events.CodeOf(err) != events.CodePatchConflict {
					t.Fatalf("apply error with code %s: %v", events.CodeOf(err), err)
				}
			}
		}
	})
}

// preFor builds a pre-image the hunks of fd fit: filler up to each hunk,
// then its old lines.
func preFor(fd *fileDiff) string {
	var b strings.Builder
	n := 0
	for _, h := range fd.hunks {
		for ; n < h.pos(); n++ {
			b.WriteString("~\n")
		}
		for _, l := range h.old {
			b.WriteString(l)
			n++
		}
	}
	return b.String()
}
