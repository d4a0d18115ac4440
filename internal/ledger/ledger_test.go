package ledger_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
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

// TestRecordsWrittenInPlace covers what the bare-system-call writers
// must keep: an update shorter than the record it replaces leaves no tail
// behind; a result's temporary file left by a crash is written over, and
// no temporary name is left once the result is in; Forget removes what a
// crash or an older version left in the op's directory, a subdirectory
// included.
func TestRecordsWrittenInPlace(t *testing.T) {
	l := ledger.Ledger{Dir: t.TempDir(), Name: "test", NoSync: true}
	p, err := l.Begin("op1", "A1", []byte(`{"attempt":"A1","argv_sha256":"sha256:00","pid":0,"note":"long"}`))
	require.NoError(t, err)
	require.NoError(t, l.Update(p, []byte(`{"attempt":"A1","pid":7}`)))
	b, err := l.Started("op1", "A1")
	require.NoError(t, err)
	assert.Equal(t, `{"attempt":"A1","pid":7}`, string(b), "a shorter record is cut to its length")

	opDir := filepath.Join(l.Dir, "op1")
	require.NoError(t, os.WriteFile(filepath.Join(opDir, "A1.done.tmp"), []byte(`{"torn`), 0o600))
	require.NoError(t, l.Finish("op1", "A1", []byte(`{"ok":true}`)))
	b, err = l.Done("op1", "A1")
	require.NoError(t, err)
	assert.Equal(t, `{"ok":true}`, string(b))
	names := func() []string {
		entries, err := os.ReadDir(opDir)
		require.NoError(t, err)
		var n []string
		for _, e := range entries {
			n = append(n, e.Name())
		}
		return n
	}
	assert.ElementsMatch(t, []string{"A1.started", "A1.done"}, names())

	// What an earlier version's os.CreateTemp could leave, and a
	// directory nothing here makes: Forget removes it all the same.
	require.NoError(t, os.WriteFile(filepath.Join(opDir, ".A1.done.tmp-123"), nil, 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(opDir, "sub", "deeper"), 0o700))
	require.NoError(t, l.Forget("op1"))
	_, err = os.Stat(opDir)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, l.Forget("op1"), "forgetting an op with no records is no error")

	_, err = l.Begin("op2", "A1", nil)
	require.NoError(t, err)
	err = l.Update(filepath.Join(l.Dir, "op2", "A9.started"), []byte(`{}`))
	assert.ErrorIs(t, err, fs.ErrNotExist, "an update never creates a record")
	assert.ErrorContains(t, err, "test ledger:")
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

// BenchmarkAttempt is the ledger's share of one exec call: the started
// record, its pid update, the result, and forgetting the op once its
// outcome is stored. sync=off is the ledger beside an embedded server
// that fsyncs on an interval (ledgerNoSync), the default.
func BenchmarkAttempt(b *testing.B) {
	started := []byte(`{"attempt":"A1","argv_sha256":"sha256:8a5edab282632443219e051e4ade2d1d5bbc671c781051bf1437897cbdfea0f1","started_at":"2026-12-04T18:00:00.123456789Z"}`)
	withPID := []byte(`{"attempt":"A1","argv_sha256":"sha256:8a5edab282632443219e051e4ade2d1d5bbc671c781051bf1437897cbdfea0f1","started_at":"2026-12-04T18:00:00.123456789Z","pid":123456}`)
	done := []byte(`{"exit_code":0,"stdout":"","stderr":"","duration_ms":1}`)
	for _, noSync := range []bool{true, false} {
		name := "sync=on"
		if noSync {
			name = "sync=off"
		}
		b.Run(name, func(b *testing.B) {
			l := ledger.Ledger{Dir: b.TempDir(), Name: "bench", NoSync: noSync}
			i := 0
			for b.Loop() {
				op := "op" + strconv.Itoa(i)
				i++
				p, err := l.Begin(op, "A1", started)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Update(p, withPID); err != nil {
					b.Fatal(err)
				}
				if err := l.Finish(op, "A1", done); err != nil {
					b.Fatal(err)
				}
				if err := l.Forget(op); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
