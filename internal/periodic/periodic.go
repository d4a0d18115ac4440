package periodic

import (
	"context"
	"time"
)

// Every calls fn each interval, first after one interval, until ctx ends.
// A call that runs long delays the next; ticks missed meanwhile are
// dropped, not queued.
func Every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}
