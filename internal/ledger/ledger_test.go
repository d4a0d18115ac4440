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

	r, err := l.Begin("op1", "A1", []byte(`{"n":1}`))
	require.NoError(t, err)
	_, err = l.Begin("op1", "A1", []byte(`{"n":2}`))
	assert.ErrorIs(t, err, ledger.ErrStarted, "an attempt starts once")
	require.NoError(t, r.Update([]byte(`{"n":1,"pid":7}`)))
	b, err := l.Started("op1", "A1")
	require.NoError(t, err)
	assert.JSONEq(t, `{"n":1,"pid":7}`, string(b))

	_, err = l.Done("op1", "A1")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, l.Finish("op1", "A1", []byte(`{"ok":true}`)))
	b, err = l.Done("op1", "A1")
	require.NoError(t, err)
	assert.JSONEq(t, `{"ok":true}`, string(b))

	// A second attempt of the op (a recovery that runs it again) is its
	// own story, in the same file.
	_, err = l.Started("op1", "A2")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = l.Begin("op1", "A2", []byte(`{"n":3}`))
	require.NoError(t, err)
	_, err = l.Begin("op1", "A2", nil)
	assert.ErrorIs(t, err, ledger.ErrStarted)
	_, err = l.Done("op1", "A2")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	b, err = l.Done("op1", "A1")
	require.NoError(t, err)
	assert.JSONEq(t, `{"ok":true}`, string(b))

	q, err := l.Begin("op2", "A1", nil)
	require.NoError(t, err)
	require.NoError(t, q.Abandon())
	_, err = l.Started("op2", "A1")
	assert.ErrorIs(t, err, fs.ErrNotExist, "an abandoned attempt has no record")
	_, err = l.Begin("op2", "A1", []byte(`{"again":true}`))
	require.NoError(t, err, "an abandoned attempt may start")

	kept, err := l.Kept()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"op1", "op2"}, kept)
	require.NoError(t, l.Forget("op1"))
	kept, err = l.Kept()
	require.NoError(t, err)
	assert.Equal(t, []string{"op2"}, kept)
	entries, err := os.ReadDir(l.Dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "op2.attempts", entries[0].Name(), "one file per op, nothing else")
}

// TestTornTailsReadAsStarted is what a crash mid-append leaves: the
// file ends in a frame that is not whole. A torn result is no result; a
// torn started record is a started record all the same; a tail too torn
// to name its attempt counts as started for every attempt that has no
// record, and never hides one that has.
func TestTornTailsReadAsStarted(t *testing.T) {
	dir := t.TempDir()
	l := ledger.Ledger{Dir: dir, Name: "test", NoSync: true}
	file := filepath.Join(dir, "op1.attempts")
	r, err := l.Begin("op1", "A1", []byte(`{"attempt":"A1"}`))
	require.NoError(t, err)
	require.NoError(t, r.Update([]byte(`{"attempt":"A1","pid":7}`)))
	whole, err := os.ReadFile(file)
	require.NoError(t, err)

	tail := func(s string) {
		t.Helper()
		require.NoError(t, os.WriteFile(file, append(append([]byte{}, whole...), s...), 0o600))
	}
	started := func(attempt string) (string, error) {
		b, err := l.Started("op1", attempt)
		return string(b), err
	}

	// A result cut short: none, and the attempt's started record stands.
	tail("done A1 40\n{\"exit_code\":0")
	_, err = l.Done("op1", "A1")
	assert.ErrorIs(t, err, fs.ErrNotExist, "a torn result is no result")
	b, err := started("A1")
	require.NoError(t, err)
	assert.Equal(t, `{"attempt":"A1","pid":7}`, b)
	_, err = started("A2")
	assert.ErrorIs(t, err, fs.ErrNotExist, "a torn frame that names A1 is not A2's")

	// Another attempt's started record cut short: started, unreadable.
	tail("started A2 30\n{\"attempt\":")
	b, err = started("A2")
	require.NoError(t, err)
	assert.Equal(t, `{"attempt":`, b)
	_, err = l.Begin("op1", "A2", nil)
	assert.ErrorIs(t, err, ledger.ErrStarted)

	// A tail that names nobody: every attempt without a record reads as
	// started; one with a record keeps it.
	for _, torn := range []string{"star", "started A", "started A3 9999999999999\n", "\x00\x00\x00\x00"} {
		tail(torn)
		b, err = started("A3")
		require.NoError(t, err, "%q", torn)
		assert.Empty(t, b, "%q", torn)
		b, err = started("A1")
		require.NoError(t, err)
		assert.Equal(t, `{"attempt":"A1","pid":7}`, b, "%q", torn)
	}

	// Kinds this version does not know are skipped.
	tail("note A1 2\n{}\ndone A1 2\n{}\n")
	res, err := l.Done("op1", "A1")
	require.NoError(t, err)
	assert.Equal(t, `{}`, string(res))
}

// TestEarlierLayoutIsReadAndRemoved: a data dir written by a version that
// kept a directory per op is read by recovery, listed, and removed by
// Forget, beside ops in the present layout.
func TestEarlierLayoutIsReadAndRemoved(t *testing.T) {
	dir := t.TempDir()
	l := ledger.Ledger{Dir: dir, Name: "test"}
	old := filepath.Join(dir, "op_old")
	require.NoError(t, os.Mkdir(old, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(old, "A1.started"), []byte(`{"attempt":"A1"}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(old, "A1.done"), []byte(`{"ok":1}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(old, "A2.started"), []byte(`{"attempt":"A2"}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(old, ".A2.done.tmp-7"), nil, 0o600))
	_, err := l.Begin("op_new", "A1", nil)
	require.NoError(t, err)

	b, err := l.Done("op_old", "A1")
	require.NoError(t, err)
	assert.Equal(t, `{"ok":1}`, string(b))
	b, err = l.Started("op_old", "A2")
	require.NoError(t, err)
	assert.Equal(t, `{"attempt":"A2"}`, string(b))
	_, err = l.Done("op_old", "A2")
	assert.ErrorIs(t, err, fs.ErrNotExist)

	kept, err := l.Kept()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"op_old", "op_new"}, kept)
	require.NoError(t, l.Forget("op_old"))
	require.NoError(t, l.Forget("op_new"))
	require.NoError(t, l.Forget("op_none"), "forgetting an op with no records is no error")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

func TestIdsThatAreNoFileNameAreRefused(t *testing.T) {
	l := ledger.Ledger{Dir: t.TempDir(), Name: "test"}
	for _, bad := range [][2]string{{"", "A1"}, {"../x", "A1"}, {".hidden", "A1"}, {"op", "a/b"}, {"op", ""}, {"op", "a b"}, {"op", "a\nb"}} {
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
				r, err := l.Begin(op, "A1", started)
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Update(withPID); err != nil {
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
