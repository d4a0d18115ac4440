package ledger_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
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
	assert.Equal(t, []string{"journal-0000000000000001.log"}, ledger.DirNames(t, l.Dir), "one journal for every op, no file per op")

	// Read again from disk, as after a restart: the same records.
	ledger.Reload(l.Dir)
	kept, err = l.Kept()
	require.NoError(t, err)
	assert.Equal(t, []string{"op2"}, kept, "a forgotten op stays forgotten")
	_, err = l.Done("op1", "A1")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	b, err = l.Started("op2", "A1")
	require.NoError(t, err)
	assert.JSONEq(t, `{"again":true}`, string(b))
	_, err = l.Begin("op2", "A1", nil)
	assert.ErrorIs(t, err, ledger.ErrStarted, "an attempt read back from disk starts once")
}

// TestTornTailsReadAsStarted: the per-op files of the layout before the
// journal (<op>.attempts, text frames), which a data dir may still hold
// after an upgrade, are read as that version read them. A torn result is
// no result; a torn started record is a started record all the same; a
// tail too torn to name its attempt counts as started for every attempt
// that has no record, and never hides one that has.
func TestTornTailsReadAsStarted(t *testing.T) {
	dir := t.TempDir()
	l := ledger.Ledger{Dir: dir, Name: "test", NoSync: true}
	file := filepath.Join(dir, "op1.attempts")
	whole := []byte("started A1 16\n{\"attempt\":\"A1\"}\nstarted A1 24\n{\"attempt\":\"A1\",\"pid\":7}\n")
	require.NoError(t, os.WriteFile(file, whole, 0o600))
	ledger.Reload(dir)
	kept, err := l.Kept()
	require.NoError(t, err)
	assert.Equal(t, []string{"op1"}, kept)

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
	kept, err = l.Kept()
	require.NoError(t, err)
	assert.Empty(t, kept)
	for _, name := range ledger.DirNames(t, dir) {
		assert.Regexp(t, `^journal-[0-9a-f]{16}\.log$`, name, "the earlier layout's files are gone")
	}
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

// TestForgottenRecordsAreOverwritten: a result (a program's output, in
// the clear) does not outlive its op in a segment that other ops keep.
func TestForgottenRecordsAreOverwritten(t *testing.T) {
	dir := t.TempDir()
	l := ledger.Ledger{Dir: dir, Name: "test", NoSync: true}
	_, err := l.Begin("other", "A1", []byte(`{"o":1}`))
	require.NoError(t, err)
	_, err = l.Begin("op1", "A1", []byte(`{"argv_sha256":"sha256:00"}`))
	require.NoError(t, err)
	require.NoError(t, l.Finish("op1", "A1", []byte(`{"stdout":"the-secret-output"}`)))
	seg := filepath.Join(dir, "journal-0000000000000001.log")
	b, err := os.ReadFile(seg)
	require.NoError(t, err)
	require.Contains(t, string(b), "the-secret-output")
	require.NoError(t, l.Forget("op1"))
	b, err = os.ReadFile(seg)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "the-secret-output")
	assert.NotContains(t, string(b), "sha256:00")

	kept, err := ledger.ReadKept(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"other"}, kept, "read from disk: the overwritten frames are skipped")
	rec, err := l.Started("other", "A1")
	require.NoError(t, err)
	assert.Equal(t, `{"o":1}`, string(rec))
}

// TestJournalSkipsDamagedFrames: what a crash or a damaged disk leaves in
// a segment (a frame cut short, bytes that are no frame, a frame whose
// checksum fails) is skipped, and the whole frames after it still count.
func TestJournalSkipsDamagedFrames(t *testing.T) {
	src := t.TempDir()
	l := ledger.Ledger{Dir: src, Name: "test", NoSync: true}
	seg := filepath.Join(src, "journal-0000000000000001.log")
	frames := [][]byte{}
	last := 0
	step := func(f func() error) {
		t.Helper()
		require.NoError(t, f())
		b, err := os.ReadFile(seg)
		require.NoError(t, err)
		frames = append(frames, b[last:])
		last = len(b)
	}
	step(func() error { _, err := l.Begin("opA", "A1", []byte(`{"a":1}`)); return err })
	step(func() error { return l.Finish("opA", "A1", []byte(`{"exit_code":0}`)) })
	step(func() error { _, err := l.Begin("opB", "B1", []byte(`{"b":1}`)); return err })
	step(func() error { _, err := l.Begin("opC", "C1", []byte(`{"c":1}`)); return err })

	flipped := append([]byte{}, frames[3]...)
	flipped[len(flipped)-2] ^= 0x20
	var crafted []byte
	crafted = append(crafted, frames[0]...)
	crafted = append(crafted, frames[1][:len(frames[1])-4]...) // opA's result, cut short
	crafted = append(crafted, "ALJ1\x00\x00\x00\x05junk and more junk"...)
	crafted = append(crafted, frames[2]...) // whole: read
	crafted = append(crafted, flipped...)   // its checksum fails: skipped
	dst := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dst, "journal-0000000000000007.log"), crafted, 0o600))

	m := ledger.Ledger{Dir: dst, Name: "test"}
	b, err := m.Started("opA", "A1")
	require.NoError(t, err)
	assert.Equal(t, `{"a":1}`, string(b))
	_, err = m.Done("opA", "A1")
	assert.ErrorIs(t, err, fs.ErrNotExist, "a result cut short is no result: the attempt reads as started without one")
	b, err = m.Started("opB", "B1")
	require.NoError(t, err, "a whole frame after damage is read")
	assert.Equal(t, `{"b":1}`, string(b))
	_, err = m.Started("opC", "C1")
	assert.ErrorIs(t, err, fs.ErrNotExist, "a frame whose checksum fails is no record")
	kept, err := m.Kept()
	require.NoError(t, err)
	assert.Equal(t, []string{"opA", "opB"}, kept)

	// Appends go to a segment of their own, after the last one found.
	_, err = m.Begin("opD", "D1", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"journal-0000000000000007.log", "journal-0000000000000008.log"}, ledger.DirNames(t, dst))
}

// TestJournalCopiesLongLivedOpsForward: an op whose attempt outlives many
// others (a long call) does not keep every segment written since: once
// more than the limit are kept, its records are copied into the newest
// and the old segments go.
func TestJournalCopiesLongLivedOpsForward(t *testing.T) {
	ledger.SmallSegments(t, 512, 2)
	dir := t.TempDir()
	l := ledger.Ledger{Dir: dir, Name: "test"}
	long, err := l.Begin("long", "L1", []byte(`{"long":true}`))
	require.NoError(t, err)
	require.NoError(t, long.Update([]byte(`{"long":true,"pid":42}`)))
	abandoned, err := l.Begin("gaveup", "G1", []byte(`{"g":1}`))
	require.NoError(t, err)
	require.NoError(t, abandoned.Abandon())
	for i := range 200 {
		op := "op" + strconv.Itoa(i)
		r, err := l.Begin(op, "A1", []byte(`{"attempt":"A1","argv_sha256":"sha256:8a5edab282632443219e051e4ade2d1d5bbc"}`))
		require.NoError(t, err)
		require.NoError(t, r.Update([]byte(`{"pid":1}`)))
		require.NoError(t, l.Finish(op, "A1", []byte(`{"exit_code":0}`)))
		require.NoError(t, l.Forget(op))
		assert.LessOrEqual(t, len(ledger.DirNames(t, dir)), 2, "after op %d", i)
	}
	ledger.Reload(dir)
	kept, err := l.Kept()
	require.NoError(t, err)
	assert.Equal(t, []string{"gaveup", "long"}, kept)
	b, err := l.Started("long", "L1")
	require.NoError(t, err)
	assert.Equal(t, `{"long":true,"pid":42}`, string(b), "the newest started record, copied forward")
	_, err = l.Started("gaveup", "G1")
	assert.ErrorIs(t, err, fs.ErrNotExist, "still abandoned")
	require.NoError(t, l.Finish("long", "L1", []byte(`{"exit_code":0}`)))
	b, err = l.Done("long", "L1")
	require.NoError(t, err)
	assert.Equal(t, `{"exit_code":0}`, string(b))
	require.NoError(t, l.Forget("long"))
	require.NoError(t, l.Forget("gaveup"))
	for i := range 20 {
		_, err := l.Begin("late"+strconv.Itoa(i), "A1", []byte(`{"attempt":"A1","argv_sha256":"sha256:8a5edab282632443219e051e4ade2d1d5bbc"}`))
		require.NoError(t, err)
		require.NoError(t, l.Forget("late"+strconv.Itoa(i)))
	}
	assert.Len(t, ledger.DirNames(t, dir), 1, "nothing left to keep but the segment in use")
	ledger.Reload(dir)
	kept, err = l.Kept()
	require.NoError(t, err)
	assert.Empty(t, kept)
}

// TestJournalConcurrentAttempts: many attempts at once, synced, across
// segments: each attempt starts once, every record reads back, and the
// ledger read again from disk holds what was not forgotten.
func TestJournalConcurrentAttempts(t *testing.T) {
	ledger.SmallSegments(t, 4096, 3)
	dir := t.TempDir()
	l := ledger.Ledger{Dir: dir, Name: "test"}
	var wg sync.WaitGroup
	var wins atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for i := range 40 {
				op := fmt.Sprintf("op-%d-%d", g, i)
				r, err := l.Begin(op, "A1", []byte(`{"n":`+strconv.Itoa(i)+`}`))
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, r.Update([]byte(`{"pid":`+strconv.Itoa(g)+`}`)))
				assert.NoError(t, l.Finish(op, "A1", []byte(op)))
				b, err := l.Done(op, "A1")
				assert.NoError(t, err)
				assert.Equal(t, op, string(b))
				if i%10 != 0 {
					assert.NoError(t, l.Forget(op))
				}
			}
			// Two starts of one attempt at once: one wins.
			if _, err := l.Begin("contended", "C1", nil); err == nil {
				wins.Add(1)
			} else {
				assert.ErrorIs(t, err, ledger.ErrStarted)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(1), wins.Load())
	ledger.Reload(dir)
	kept, err := l.Kept()
	require.NoError(t, err)
	assert.Len(t, kept, 16*4+1)
	b, err := l.Done("op-3-10", "A1")
	require.NoError(t, err)
	assert.Equal(t, "op-3-10", string(b))
	b, err = l.Started("op-3-10", "A1")
	require.NoError(t, err)
	assert.Equal(t, `{"pid":3}`, string(b))
	assert.LessOrEqual(t, len(ledger.DirNames(t, dir)), 3)
}

// The records of one exec call, as BenchmarkAttempt writes them.
var (
	benchStarted = []byte(`{"attempt":"A1","argv_sha256":"sha256:8a5edab282632443219e051e4ade2d1d5bbc671c781051bf1437897cbdfea0f1","started_at":"2026-12-04T18:00:00.123456789Z"}`)
	benchWithPID = []byte(`{"attempt":"A1","argv_sha256":"sha256:8a5edab282632443219e051e4ade2d1d5bbc671c781051bf1437897cbdfea0f1","started_at":"2026-12-04T18:00:00.123456789Z","pid":123456}`)
	benchDone    = []byte(`{"exit_code":0,"stdout":"","stderr":"","duration_ms":1}`)
)

// benchAttempt writes one exec call's records for op and forgets it.
func benchAttempt(b *testing.B, l ledger.Ledger, op string) {
	r, err := l.Begin(op, "A1", benchStarted)
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Update(benchWithPID); err != nil {
		b.Fatal(err)
	}
	if err := l.Finish(op, "A1", benchDone); err != nil {
		b.Fatal(err)
	}
	if err := l.Forget(op); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAttempt is the ledger's share of one exec call: the started
// record, its pid update, the result, and forgetting the op once its
// outcome is stored. sync=off is the ledger beside an embedded server
// that fsyncs on an interval (ledgerNoSync), the default.
func BenchmarkAttempt(b *testing.B) {
	for _, noSync := range []bool{true, false} {
		b.Run(syncName(noSync), func(b *testing.B) {
			l := ledger.Ledger{Dir: b.TempDir(), Name: "bench", NoSync: noSync}
			i := 0
			for b.Loop() {
				benchAttempt(b, l, "op"+strconv.Itoa(i))
				i++
			}
		})
	}
}

// BenchmarkAttemptParallel is BenchmarkAttempt with 16 attempts at once,
// as the exec phase of airlock bench runs them: with sync=on, attempts
// that arrive while a sync runs share the next one.
func BenchmarkAttemptParallel(b *testing.B) {
	for _, noSync := range []bool{true, false} {
		b.Run(syncName(noSync), func(b *testing.B) {
			l := ledger.Ledger{Dir: b.TempDir(), Name: "bench", NoSync: noSync}
			var n atomic.Int64
			b.SetParallelism(16 / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchAttempt(b, l, "op"+strconv.FormatInt(n.Add(1), 10))
				}
			})
		})
	}
}

func syncName(noSync bool) string {
	if noSync {
		return "sync=off"
	}
	return "sync=on"
}
