package periodic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Every calls its function once per interval, never before the first
// interval, and returns once its context ends.
func TestEveryCallsUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int32
	done := make(chan struct{})
	start := time.Now()
	var first atomic.Int64
	go func() {
		defer close(done)
		Every(ctx, 20*time.Millisecond, func() {
			if calls.Add(1) == 1 {
				first.Store(int64(time.Since(start)))
			}
		})
	}()
	assert.Eventually(t, func() bool { return calls.Load() >= 3 }, 5*time.Second, 5*time.Millisecond)
	assert.GreaterOrEqual(t, time.Duration(first.Load()), 20*time.Millisecond, "not before the first interval")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	n := calls.Load()
	time.Sleep(60 * time.Millisecond)
	assert.Equal(t, n, calls.Load(), "no call after it returned")
}
