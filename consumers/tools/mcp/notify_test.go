package mcp

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A session closed while the upstream's tools/list_changed notification
// is being handled, with the Upstream's lock held (as a drop of a dead
// session holds it): the close must not wait on the notification's
// handler, and the handler must not wait on the lock, or both wait for
// ever.
func TestCloseWhileToolsChange(t *testing.T) {
	dir := t.TempDir()
	example := filepath.Join(dir, "airlock-mcp-example")
	build := exec.Command("go", "build", "-o", example, "../../../cmd/airlock-mcp-example")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	descr := filepath.Join(dir, "description")
	require.NoError(t, os.WriteFile(descr, []byte("first description"), 0o644))
	u, err := New(UpstreamConfig{
		Name: "ex", Command: []string{example, "--out", filepath.Join(dir, "out.log"), "--calls", filepath.Join(dir, "calls.log"), "--description-file", descr},
		Timeout: 3 * time.Second, LedgerDir: filepath.Join(dir, "ledger"), Dir: dir,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = u.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = u.Executors(ctx)
	require.NoError(t, err)
	_, ok := u.recent("append")
	require.True(t, ok)

	u.mu.Lock()
	s := u.session
	require.NoError(t, os.WriteFile(descr, []byte("second description"), 0o644))
	// The example reads its description file every 100 ms and notifies
	// at once; the notification's handler runs within this wait.
	time.Sleep(500 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		u.mu.Unlock()
		<-closed
		t.Fatal("closing the session waited on the tools/list_changed handler, which waited on the Upstream's lock")
	}
	u.session = nil
	u.mu.Unlock()
}
