package ledger

import (
	"os"
	"testing"
)

// SmallSegments makes the journal start a segment past size bytes and
// keep at most n before copying the oldest's live ops forward, for t.
func SmallSegments(t testing.TB, size int64, n int) {
	oldSize, oldN := segmentBytes, maxSegments
	segmentBytes, maxSegments = size, n
	t.Cleanup(func() { segmentBytes, maxSegments = oldSize, oldN })
}

// DirNames lists the names in dir.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, en := range entries {
		out = append(out, en.Name())
	}
	return out
}
