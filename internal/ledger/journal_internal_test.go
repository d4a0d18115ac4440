package ledger

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSegmentThatCannotBeCreated: a full segment whose successor cannot be
// created (a full disk, no descriptor left) keeps taking appends, synced
// ones included, and the ledger goes on once creating works again.
func TestSegmentThatCannotBeCreated(t *testing.T) {
	SmallSegments(t, 256, 4)
	dir := t.TempDir()
	l := Ledger{Dir: dir, Name: "test"}
	_, err := l.Begin("op1", "A1", make([]byte, 300)) // past the segment size at once
	require.NoError(t, err)
	j, err := journalOf(dir)
	require.NoError(t, err)
	j.mu.Lock()
	j.dir = filepath.Join(dir, "missing") // creates fail there
	j.mu.Unlock()
	_, err = l.Begin("op2", "A1", []byte(`{"n":2}`))
	require.NoError(t, err, "appended to the full segment, and synced")
	require.NoError(t, l.Finish("op2", "A1", []byte(`{"ok":true}`)))
	j.mu.Lock()
	j.dir = dir
	failed := j.failed
	j.mu.Unlock()
	require.NoError(t, failed)
	_, err = l.Begin("op3", "A1", []byte(`{"n":3}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"journal-0000000000000001.log", "journal-0000000000000002.log"}, DirNames(t, dir))
	Reload(dir)
	b, err := l.Done("op2", "A1")
	require.NoError(t, err)
	assert.Equal(t, `{"ok":true}`, string(b))
}

// TestAbandonedAttemptCopiedAsOneFrame: compaction copies an abandoned
// attempt as its abandoned record alone, so that no copy cut short can
// read as started.
func TestAbandonedAttemptCopiedAsOneFrame(t *testing.T) {
	SmallSegments(t, 200, 1)
	dir := t.TempDir()
	l := Ledger{Dir: dir, Name: "test"}
	r, err := l.Begin("gaveup", "G1", []byte(`{"g":1}`))
	require.NoError(t, err)
	require.NoError(t, r.Abandon())
	for _, op := range []string{"a", "b", "c"} {
		_, err := l.Begin(op, "A1", make([]byte, 250))
		require.NoError(t, err)
		require.NoError(t, l.Forget(op))
	}
	names := DirNames(t, dir)
	require.Len(t, names, 1)
	b, err := os.ReadFile(filepath.Join(dir, names[0]))
	require.NoError(t, err)
	var kinds []byte
	scanFrames(b, func(_ int64, kind byte, op, _ string, _ []byte) {
		if op == "gaveup" {
			kinds = append(kinds, kind)
		}
	})
	assert.Equal(t, []byte{jAbandoned}, kinds)
	Reload(dir)
	_, err = l.Started("gaveup", "G1")
	assert.Error(t, err, "still abandoned")
	kept, err := l.Kept()
	require.NoError(t, err)
	assert.Equal(t, []string{"gaveup"}, kept)
}
