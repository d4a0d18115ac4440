package ledger_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/internal/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAttemptRecords(t *testing.T) {
	l := ledger.Ledger{Dir: t.TempDir(), Name: "test"}
	_, err := l.Started("op1", "A1")
	assert.ErrorIs(t, err, fs.ErrNotExist)

	p, err := l.Begin("op1", "A1", []byte(`{"n":1}`))
	require.NoError(t, err)
	_, err = l.Begin("op1", "A1", []byte(`{"n":2}`))
	assert.ErrorIs(t, err, ledger.ErrStarted, "an attempt starts once")
	require.NoError(t, l.Update(p, []byte(`{"n":1,"pid":7}`)))
	b, err := l.Started("op1", "A1")
	require.NoError(t, err)
	assert.JSONEq(t, `{"n":1,"pid":7}`, string(b))

	_, err = l.Done("op1", "A1")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, l.Finish("op1", "A1", []byte(`{"ok":true}`)))
	b, err = l.Done("op1", "A1")
	require.NoError(t, err)
	assert.JSONEq(t, `{"ok":true}`, string(b))

	q, err := l.Begin("op2", "A1", nil)
	require.NoError(t, err)
	require.NoError(t, l.Abandon(q))
	_, err = l.Started("op2", "A1")
	assert.ErrorIs(t, err, fs.ErrNotExist, "an abandoned attempt has no record")

	kept, err := l.Kept()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"op1", "op2"}, kept)
	require.NoError(t, l.Forget("op1"))
	kept, err = l.Kept()
	require.NoError(t, err)
	assert.Equal(t, []string{"op2"}, kept)
	entries, err := os.ReadDir(filepath.Join(l.Dir, "op2"))
	require.NoError(t, err)
	assert.Empty(t, entries, "no temporary file is left behind")
}

func TestIdsThatAreNoFileNameAreRefused(t *testing.T) {
	l := ledger.Ledger{Dir: t.TempDir(), Name: "test"}
	for _, bad := range [][2]string{{"", "A1"}, {"../x", "A1"}, {".hidden", "A1"}, {"op", "a/b"}, {"op", ""}} {
		_, err := l.Begin(bad[0], bad[1], nil)
		assert.ErrorContains(t, err, "test ledger:", "%q", bad)
	}
	entries, err := os.ReadDir(l.Dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}
