package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A burst of ops while holds are pending, with the default secure-erase
// backlog (so most requests are deleted, not overwritten): once the ops
// have ended and their requests are scrubbed, no byte of their args is
// left in any file of the data dir. A pending hold must not keep the
// burst's deleted requests on disk with it.
func TestNoPlaintextAfterABurstWithHoldsPending(t *testing.T) {
	if testing.Short() {
		t.Skip("a burst of 1,000 ops")
	}
	const burst, inFlight = 1000, 64
	dir := t.TempDir()
	a, counter := holdsApp(t, app.Config{DataDir: dir, ScrubInterval: 20 * time.Millisecond})
	c := agentClient(t, a)
	m := markers{}

	// Two holds that stay pending through the burst, one before it and one
	// in the middle of it.
	first := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"m":%q}`, m.new("held-first")))})

	var wg sync.WaitGroup
	sem := make(chan struct{}, inFlight)
	args := make([]string, burst)
	for i := range burst {
		args[i] = fmt.Sprintf(`{"m":%q}`, m.new(fmt.Sprintf("op%04d", i)))
	}
	var second struct {
		sync.Mutex
		opID string
	}
	errs := make(chan error, burst)
	for i := range burst {
		if i == burst/2 {
			out := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"m":%q}`, m.new("held-second")))})
			second.Lock()
			second.opID = out.OpID
			second.Unlock()
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out, err := c.Submit(ctxT(t), events.Request{Workspace: "auto", Agent: "agent", Tool: "echo", Args: json.RawMessage(args[i])})
			if err == nil && out.State != events.StateCompleted {
				err = fmt.Errorf("op %d: %+v", i, out)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Everything settles: every request handled by the gate, every ended
	// op's request scrubbed.
	waitScrubbed(t, a, 60*time.Second)
	// The file store writes deletes to disk at its next flush.
	time.Sleep(500 * time.Millisecond)

	// Both holds are still pending, their args readable.
	for _, id := range []string{first.OpID, second.opID} {
		op, err := a.Store.Op(id)
		require.NoError(t, err)
		assert.Equal(t, events.StateHeld, op.State)
	}

	scan := func(when string) {
		t.Helper()
		found := map[string]int{}
		eachFile(t, dir, func(path string, b []byte) {
			for _, name := range m.find(b) {
				if name != "held-first" && name != "held-second" {
					found[path]++
				}
			}
		})
		for path, n := range found {
			t.Errorf("%s: %s holds the args of %d ended ops", when, path, n)
		}
	}
	scan("running")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Shutdown(sctx))
	scan("stopped")
}
