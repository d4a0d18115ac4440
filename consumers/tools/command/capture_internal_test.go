package command

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCaptureKeepsMaxOutput checks the capture itself, before the result
// is cut to fit events.MaxResultBytes: 3 MiB written, 1 MiB kept.
func TestCaptureKeepsMaxOutput(t *testing.T) {
	e, err := New(Config{LedgerDir: t.TempDir()})
	require.NoError(t, err)
	sp, err := e.command([]string{"sh", "-c", `head -c 3145728 /dev/zero | tr '\0' a; head -c 3145728 /dev/zero >&2`}, t.TempDir())
	require.NoError(t, err)
	start := time.Now()
	o, err := sp.run(context.Background(), 20*time.Second, func(int) {})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.False(t, o.timedOut)
	assert.False(t, o.stray)
	r := sp.result(o)
	assert.Equal(t, 0, r.ExitCode)
	assert.Equal(t, DefaultMaxOutput, len(r.Stdout))
	assert.Equal(t, DefaultMaxOutput, len(r.Stderr))
	assert.True(t, r.StdoutTruncated)
	assert.True(t, r.StderrTruncated)
	assert.Equal(t, bytes.Repeat([]byte("a"), DefaultMaxOutput), r.Stdout)
}

func TestStrayProcessDoesNotHoldTheCall(t *testing.T) {
	e, err := New(Config{LedgerDir: t.TempDir()})
	require.NoError(t, err)
	// setsid leaves the process group; the sleep holds stdout open. The
	// shell waits until it has left, else the group kill gets it first.
	dir := t.TempDir()
	sp, err := e.command([]string{"sh", "-c", `setsid sh -c 'echo $$ > pid; exec sleep 5' & until [ -s pid ]; do sleep 0.01; done; echo hi`}, dir)
	require.NoError(t, err)
	start := time.Now()
	o, err := sp.run(context.Background(), 20*time.Second, func(int) {})
	require.NoError(t, err)
	took := time.Since(start)
	assert.True(t, o.stray)
	assert.GreaterOrEqual(t, took, DrainGrace)
	assert.Less(t, took, DrainGrace+2*time.Second)
	assert.Equal(t, "hi\n", string(sp.result(o).Stdout))
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	_ = syscall.Kill(pid, syscall.SIGKILL) // it left the group: ours to clean up
}

func TestEncodeFitsLimit(t *testing.T) {
	for _, tc := range []struct {
		name           string
		stdout, stderr []byte
	}{
		{"ascii", bytes.Repeat([]byte("a"), 1<<20), bytes.Repeat([]byte("b"), 1<<20)},
		{"escaped", bytes.Repeat([]byte{0}, 1<<20), []byte("small")},
		{"multibyte", []byte(strings.Repeat("é", 1<<19)), nil},
		{"binary", bytes.Repeat([]byte{0xff, 'x'}, 1<<19), bytes.Repeat([]byte("\n"), 1<<20)},
		{"fits", []byte("out"), []byte("err")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const limit = 64 << 10
			r := Result{ExitCode: 1, DurationMS: 5, Stdout: tc.stdout, Stderr: tc.stderr}
			b, err := r.encode(limit)
			require.NoError(t, err)
			assert.LessOrEqual(t, len(b), limit)
			var back Result
			require.NoError(t, json.Unmarshal(b, &back))
			assert.True(t, bytes.HasPrefix(tc.stdout, back.Stdout))
			assert.True(t, bytes.HasPrefix(tc.stderr, back.Stderr))
			assert.Equal(t, len(back.Stdout) < len(tc.stdout), back.StdoutTruncated)
			assert.Equal(t, len(back.Stderr) < len(tc.stderr), back.StderrTruncated)
			if utf8.Valid(tc.stdout) {
				assert.True(t, utf8.Valid(back.Stdout), "cut on a rune boundary")
			}
			if tc.name != "fits" {
				assert.Greater(t, len(b), limit*3/4, "not cut much more than needed")
			}
		})
	}
}

func TestTrimRune(t *testing.T) {
	e := []byte("aé") // 'a', 0xc3, 0xa9
	assert.Equal(t, []byte("a"), trimRune(e[:2]))
	assert.Equal(t, e, trimRune(e))
	euro := []byte("€") // three bytes
	assert.Empty(t, trimRune(euro[:1]))
	assert.Empty(t, trimRune(euro[:2]))
	assert.Equal(t, euro, trimRune(euro))
	assert.Empty(t, trimRune(nil))
}
