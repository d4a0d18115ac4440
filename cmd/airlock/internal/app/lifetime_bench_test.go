package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/stretchr/testify/require"
)

// BenchmarkArgsLifetimeUnderLoad measures how long an ended op's args stay
// readable in AIRLOCK_REQUESTS's files under sustained load (64 echo ops
// in flight for 15 s, the default --secure-erase-backlog, a hold pending
// throughout): every 250 ms it scans the stream's block files for the
// args of every op that completed, and reports the longest and the 99th
// percentile time from an op's completion to the last scan that found its
// args (0 when no scan found them), with the load's ops/s.
func BenchmarkArgsLifetimeUnderLoad(b *testing.B) {
	const (
		inFlight = 64
		load     = 15 * time.Second
		every    = 250 * time.Millisecond
	)
	dir := b.TempDir()
	a, err := app.Start(context.Background(), app.Config{DataDir: dir, Policy: confirmSpec(), ScrubInterval: 20 * time.Millisecond})
	require.NoError(b, err)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	}()
	c, err := producers.New(a.Conn, producers.WithWait(30*time.Second))
	require.NoError(b, err)
	defer c.Close()
	ctx := context.Background()
	held, err := c.Submit(ctx, events.Request{Workspace: "review", Agent: "agent", Tool: "exec", Args: json.RawMessage(`{"argv":["/bin/true"]}`)})
	require.NoError(b, err)
	require.Equal(b, events.StateHeld, held.State, "%+v", held)

	type done struct {
		marker []byte
		at     time.Time
	}
	var (
		mu        sync.Mutex
		completed []done
		lastSeen  = map[int]time.Time{} // index into completed -> last scan that found it
		ops       atomic.Int64
	)
	stop := time.Now().Add(load)
	var wg sync.WaitGroup
	for w := range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				marker := fmt.Sprintf("LIFE-%02d-%07d-", w, i)
				out, err := c.Submit(ctx, events.Request{Workspace: "auto", Agent: "agent", Tool: "echo", Args: json.RawMessage(fmt.Sprintf(`{"m":%q}`, marker+string(bytes.Repeat([]byte("x"), 200))))})
				if err != nil || out.State != events.StateCompleted {
					continue
				}
				ops.Add(1)
				mu.Lock()
				completed = append(completed, done{[]byte(marker), time.Now()})
				mu.Unlock()
			}
		}()
	}
	blocks := filepath.Join(dir, "jetstream", "jetstream", "*", "streams", streams.Requests, "msgs", "*.blk")
	scan := func() {
		files, _ := filepath.Glob(blocks)
		var data [][]byte
		for _, f := range files {
			if d, err := os.ReadFile(f); err == nil {
				data = append(data, d)
			}
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for i, d := range completed {
			for _, blk := range data {
				if bytes.Contains(blk, d.marker) {
					lastSeen[i] = now
					break
				}
			}
		}
	}
	ticker := time.NewTicker(every)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	start := time.Now()
loop:
	for {
		select {
		case <-ticker.C:
			scan()
		case <-finished:
			break loop
		}
	}
	took := time.Since(start)
	// After the load: until nothing of an ended op is left, or 60 s.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		time.Sleep(every)
		before := len(lastSeen)
		scan()
		fresh := 0
		for _, at := range lastSeen {
			if time.Since(at) < every {
				fresh++
			}
		}
		if fresh == 0 && len(lastSeen) == before {
			break
		}
	}
	ticker.Stop()
	var lives []time.Duration
	for i, d := range completed {
		life := time.Duration(0)
		if at, ok := lastSeen[i]; ok && at.After(d.at) {
			life = at.Sub(d.at)
		}
		lives = append(lives, life)
	}
	slices.Sort(lives)
	if len(lives) == 0 {
		b.Fatal("no op completed")
	}
	p99 := lives[len(lives)*99/100]
	b.ReportMetric(float64(ops.Load())/took.Seconds(), "ops/s")
	b.ReportMetric(p99.Seconds(), "p99-s-on-disk")
	b.ReportMetric(lives[len(lives)-1].Seconds(), "max-s-on-disk")
	b.Logf("%d ops in %s; after completion, args on disk: p50 %s, p99 %s, max %s", ops.Load(), took.Round(time.Millisecond),
		lives[len(lives)/2].Round(time.Millisecond), p99.Round(time.Millisecond), lives[len(lives)-1].Round(time.Millisecond))
}
