package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// mcpBenchCalls is how many calls each measurement makes.
var mcpBenchCalls = map[int]int{1: 400, 16: 3200}

// BenchmarkMCP measures what `airlock mcp` adds to a call: the same
// upstream tool (the example server's slow_append with no delay, a line
// appended and fsynced) called directly over stdio and through airlock
// mcp and airlock serve --mcp (policy, the ops stream, the ledger, the
// upstream), at 1 and 16 calls in flight, p50 and p99 of each, in one
// run. It runs once, whatever b.N.
func BenchmarkMCP(b *testing.B) {
	g := newMCPRig(b)
	through := g.stdio(b, time.Minute, nil)

	dir := b.TempDir()
	cmd := exec.Command(mcpExample, "--out", filepath.Join(dir, "out.log"), "--calls", filepath.Join(dir, "calls.log"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	direct, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "v1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	cancel()
	require.NoError(b, err)
	b.Cleanup(func() { _ = direct.Close() })

	var seq atomic.Int64
	measure := func(s *sdk.ClientSession, tool string, inflight, calls int) []time.Duration {
		var mu sync.Mutex
		var took []time.Duration
		var wg sync.WaitGroup
		var left atomic.Int64
		left.Store(int64(calls))
		for range inflight {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					args := map[string]any{"line": fmt.Sprintf("bench-%d", seq.Add(1)), "delay_ms": 0}
					if tool == "echo" {
						args = map[string]any{"n": seq.Add(1)}
					}
					start := time.Now()
					res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
					d := time.Since(start)
					if err != nil || res.IsError {
						b.Errorf("%s: %v %s", tool, err, text(res))
						return
					}
					mu.Lock()
					took = append(took, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(took)
		return took
	}
	pct := func(d []time.Duration, p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

	// Warm both paths up: connections, the upstream launched, caches.
	measure(direct, "slow_append", 1, 50)
	measure(through, "notes__slow_append", 1, 50)
	b.ResetTimer()
	for _, inflight := range []int{1, 16} {
		n := mcpBenchCalls[inflight]
		d := measure(direct, "slow_append", inflight, n)
		a := measure(through, "notes__slow_append", inflight, n)
		e := measure(through, "echo", inflight, n)
		if b.Failed() {
			return
		}
		fmt.Printf("mcp %2d in flight: echo through airlock mcp (no upstream) p50 %.2f ms p99 %.2f ms\n", inflight, ms(pct(e, .5)), ms(pct(e, .99)))
		fmt.Printf("mcp %2d in flight: direct p50 %.2f ms p99 %.2f ms; through airlock p50 %.2f ms p99 %.2f ms; added p50 %.2f ms p99 %.2f ms (%d calls each)\n",
			inflight, ms(pct(d, .5)), ms(pct(d, .99)), ms(pct(a, .5)), ms(pct(a, .99)), ms(pct(a, .5)-pct(d, .5)), ms(pct(a, .99)-pct(d, .99)), n)
		b.ReportMetric(ms(pct(a, .5)-pct(d, .5)), fmt.Sprintf("added-p50-ms/%d-in-flight", inflight))
		b.ReportMetric(ms(pct(a, .99)-pct(d, .99)), fmt.Sprintf("added-p99-ms/%d-in-flight", inflight))
		b.ReportMetric(ms(pct(d, .5)), fmt.Sprintf("direct-p50-ms/%d-in-flight", inflight))
	}
}
