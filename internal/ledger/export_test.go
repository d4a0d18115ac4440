package ledger

import "testing"

// SmallSegments makes the journal start a segment past size bytes and
// keep at most n before copying the oldest's live ops forward, for t.
func SmallSegments(t testing.TB, size int64, n int) {
	oldSize, oldN := segmentBytes, maxSegments
	segmentBytes, maxSegments = size, n
	t.Cleanup(func() { segmentBytes, maxSegments = oldSize, oldN })
}
