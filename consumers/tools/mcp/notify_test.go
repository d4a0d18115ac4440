package mcp

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A session closed while the upstream's tools/list_changed notification
// is being handled, with the Upstream's lock held (as Close and the drop
// of a dead session hold it): the SDK's close waits for the handler, so
// the handler must not wait for the lock, or both wait for ever.
func TestCloseWhileToolsChange(t *testing.T) {
	example := os.Getenv("AIRLOCK_MCP_EXAMPLE") // built by TestMain
	require.NotEmpty(t, example)
	dir := t.TempDir()
	descr := filepath.Join(dir, "description")
	require.NoError(t, os.WriteFile(descr, []byte("first description"), 0o644))
	u, err := New(UpstreamConfig{
		Name:    "ex",
		Command: []string{example, "--out", filepath.Join(dir, "out.log"), "--calls", filepath.Join(dir, "calls.log"), "--description-file", descr},
		Timeout: 3 * time.Second, LedgerDir: filepath.Join(dir, "ledger"), Dir: dir,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { _ = u.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(15 * time.Second):
			t.Error("Close waited on the tools/list_changed handler")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = u.Executors(ctx)
	require.NoError(t, err)
	_, ok := u.recent("append")
	require.True(t, ok)

	u.mu.Lock()
	require.NoError(t, os.WriteFile(descr, []byte("second description"), 0o644))
	// The example reads its description file every 100 ms and notifies
	// at once: the notification is handled while the lock is held.
	if !assert.Eventually(t, func() bool { return u.changes.Load() > 0 }, 10*time.Second, 10*time.Millisecond) {
		u.mu.Unlock()
		t.Fatal("the tools/list_changed notification was not handled while the Upstream's lock was held")
	}
	closed := make(chan error, 1)
	go func() { closed <- u.dropLocked() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		u.mu.Unlock()
		<-closed
		t.Fatal("closing the session waited on the tools/list_changed handler")
	}
	u.mu.Unlock()

	// A new session lists afresh; a change after that listing makes it
	// stale.
	_, err = u.Executors(ctx)
	require.NoError(t, err)
	_, ok = u.recent("append")
	require.True(t, ok, "a listing after the last change is fresh")
	require.NoError(t, os.WriteFile(descr, []byte("third description"), 0o644))
	require.Eventually(t, func() bool { _, ok := u.recent("append"); return !ok }, 10*time.Second, 10*time.Millisecond,
		"the listing is stale once the upstream said its tools changed")
}
