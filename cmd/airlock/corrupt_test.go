package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// verifyStatuses are the typed results of audit verify.
var verifyStatuses = []string{"OK", "LEAF_MISMATCH", "HASH_MISMATCH", "ROOT_MISMATCH", "BAD_SIGNATURE", "ROLLBACK", "FORK", "INDEX_MISMATCH", "CORRUPT"}

// One flipped byte anywhere in a data dir gives a typed result from
// audit verify and from serve's start: a status and exit 0 or 5, never a
// panic, a stack trace or the usage status.
func TestCorruptionMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	dir, addr := t.TempDir(), freePort(t)
	srv := startServer(t, dir, addr, nil)
	submitEcho(t, srv, "m1", 30)
	srv.stopOK(t)
	// A second life: Pebble flushes the first one's WAL to a table.
	srv = startServer(t, dir, addr, nil)
	submitEcho(t, srv, "m2", 5)
	srv.stopOK(t)

	newest := func(pattern string) string {
		files, err := filepath.Glob(filepath.Join(dir, pattern))
		require.NoError(t, err)
		require.NotEmpty(t, files, pattern)
		sort.Strings(files)
		return files[len(files)-1]
	}
	kinds := []struct{ kind, path string }{
		{"sst", newest("projection/*.sst")},
		{"wal", newest("projection/*.log")},
		{"manifest", newest("projection/MANIFEST-*")},
		{"options", newest("projection/OPTIONS-*")},
		{"audit.pub", filepath.Join(dir, audit.PubFile)},
		{"audit.key", filepath.Join(dir, audit.KeyFile)},
		{"audit.checkpoint", filepath.Join(dir, audit.CheckpointFile)},
		{"jetstream block", newest("jetstream/jetstream/AIRLOCK/streams/AIRLOCK_OPS/msgs/*.blk")},
	}
	const offsets = 9
	seen := map[string]map[string]int{}
	for _, k := range kinds {
		rel, err := filepath.Rel(dir, k.path)
		require.NoError(t, err)
		fi, err := os.Stat(k.path)
		require.NoError(t, err)
		seen[k.kind] = map[string]int{}
		for i := range offsets {
			off := fi.Size() * int64(i) / (offsets - 1)
			off = min(off, fi.Size()-1)
			cp := filepath.Join(t.TempDir(), "copy")
			copyDir(t, dir, cp)
			flip(t, filepath.Join(cp, rel), off)
			what := fmt.Sprintf("%s (%s) byte %d of %d", k.kind, rel, off, fi.Size())

			out, errOut, code := run(t, "audit", "verify", "--data", cp, "--json", "--jetstream-checkpoint=false")
			assert.Contains(t, []int{0, exitAudit}, code, "%s: verify exit %d: %s", what, code, errOut)
			noTrace(t, what, errOut)
			var v verifyJSON
			if assert.NoError(t, json.Unmarshal([]byte(out), &v), "%s: %q %q", what, out, errOut) {
				assert.Contains(t, verifyStatuses, v.Status, what)
				assert.Equal(t, code == 0, v.Status == "OK", what)
				seen[k.kind]["verify "+v.Status]++
			}
			if i == offsets/2 || i == 0 {
				res := serveOn(t, cp, what)
				seen[k.kind]["serve "+res]++
			}
		}
	}
	for _, k := range kinds {
		t.Logf("%-17s %v", k.kind, seen[k.kind])
	}
	// Flips a table or key cannot hide: the data is checksummed or signed.
	for _, kind := range []string{"sst", "audit.pub", "audit.checkpoint", "jetstream block"} {
		assert.Zero(t, seen[kind]["verify OK"], "%s: a flipped byte is always found", kind)
	}
	assert.Zero(t, seen["audit.key"]["serve started"], "a flipped signing key is found at start")
	assert.Zero(t, seen["jetstream block"]["serve started"], "a flipped stream record (not the newest) is found at start")
}

// flip XORs one byte of path.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 0x5a
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}

func noTrace(t *testing.T, what, stderr string) {
	t.Helper()
	assert.NotContains(t, stderr, "panic:", what)
	assert.NotContains(t, stderr, "goroutine ", what)
}

// serveOn starts serve on dir and reports "started" (then stops it
// cleanly) or the status its refusal names; any other end fails.
func serveOn(t *testing.T, dir, what string) string {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--data", dir, "--listen", freePort(t), "--monitor", "", "--log-level", "error")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	started := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(strings.TrimSpace(sc.Text()), "nats:") {
				started <- struct{}{}
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-started:
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		<-done
		assert.Equal(t, 0, cmd.ProcessState.ExitCode(), "%s: serve stopped: %s", what, stderr.String())
		noTrace(t, what, stderr.String())
		return "started"
	case <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s: serve neither started nor refused: %s", what, stderr.String())
		return "hung"
	}
	errOut := stderr.String()
	noTrace(t, what, errOut)
	assert.Equal(t, exitAudit, cmd.ProcessState.ExitCode(), "%s: serve exit: %s", what, errOut)
	for _, s := range verifyStatuses[1:] {
		if strings.Contains(errOut, s) {
			if s == "CORRUPT" {
				assert.True(t, slices.ContainsFunc([]string{app.StoreDir, audit.PubFile, audit.KeyFile}, func(f string) bool { return strings.Contains(errOut, f) }),
					"%s: CORRUPT names the file: %s", what, errOut)
			}
			return s
		}
	}
	t.Errorf("%s: serve refused without a status: %s", what, errOut)
	return "untyped"
}

// stopOK stops the server with SIGTERM and requires a clean exit.
func (s *server) stopOK(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, err := s.stop(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, code, s.stderr.String())
}
