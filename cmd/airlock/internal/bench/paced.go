package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go/jetstream"
)

// maxPacedInFlight bounds the submits a paced phase has in flight: a
// pipeline slower than the rate is measured falling behind, not given
// unbounded goroutines.
const maxPacedInFlight = 4096

// paced submits n echo ops at rate ops/s, each at its scheduled time
// whatever the others are doing (an open loop, as agents that do not wait
// for each other), and returns each op's latency from its scheduled time
// to its outcome (so that a stall delays the ops scheduled during it,
// and counts), and the rate achieved.
func paced(ctx context.Context, c *producers.Client, rate float64, n int, prefix string, m *meter) ([]time.Duration, float64, error) {
	return openLoop(ctx, rate, n, m, func(i int) error {
		out, err := c.Submit(ctx, benchRequest(prefix, i))
		if err == nil && out.State != events.StateCompleted {
			err = &events.Error{Code: out.Code, Message: "op " + out.OpID + " is " + string(out.State)}
		}
		return err
	})
}

// openLoop calls fn(i) for i in [0, n) at rate calls/s, each at its
// scheduled time in a goroutine of its own (at most maxPacedInFlight at
// once), and returns each call's time from its scheduled start to its
// end, sorted, and the rate achieved; the first error fails it.
func openLoop(ctx context.Context, rate float64, n int, m *meter, fn func(i int) error) ([]time.Duration, float64, error) {
	defer m.end()
	interval := time.Duration(float64(time.Second) / rate)
	lat := make([]time.Duration, n)
	sem := make(chan struct{}, maxPacedInFlight)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return nil, 0, ctx.Err()
			}
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := fn(i)
			lat[i] = time.Since(due)
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
				return
			}
			m.add(1)
		})
	}
	wg.Wait()
	took := time.Since(start)
	if e := firstErr.Load(); e != nil {
		return nil, 0, *e
	}
	slices.Sort(lat)
	return lat, float64(n) / took.Seconds(), nil
}

// latencyPhases runs the phases that measure latency where load is
// normal: cfg.Paced ops paced at cfg.Rate (half the peak ops/s when 0),
// then as many ops 16 at a time.
func latencyPhases(ctx context.Context, cfg Config, js jetstream.JetStream, c *producers.Client, res *Result) error {
	rate := cfg.Rate
	if rate <= 0 {
		rate = res.OpsPerS / 2
	}
	cpu0, _ := processCPU()
	heap0 := readHeapWork()
	lat, achieved, err := paced(ctx, c, rate, cfg.Paced, "paced", cfg.track(PhasePaced, cfg.Paced))
	if err != nil {
		return err
	}
	cpu1, _ := processCPU()
	heap := readHeapWork().since(heap0)
	res.PacedCPUPerOpUS = float64((cpu1 - cpu0).Microseconds()) / float64(cfg.Paced)
	res.PacedAllocKBPerOp, res.PacedGCCycles = heap.kbPer(cfg.Paced), heap.cycles
	res.Paced, res.PacedRate, res.PacedOpsPerS = cfg.Paced, rate, achieved
	res.PacedP50MS, res.PacedP99MS = ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100])

	lat = make([]time.Duration, cfg.Paced)
	starts := make([]time.Time, cfg.Paced)
	_, took, err := submitAll(ctx, c, lowConcurrency, cfg.Paced, "low", lat, starts, cfg.track(PhaseLow, cfg.Paced), nil)
	if err != nil {
		return err
	}
	res.LowStages = stages(ctx, js, "low", starts, lat)
	slices.Sort(lat)
	res.LowConcurrency, res.LowOpsPerS = lowConcurrency, float64(cfg.Paced)/took.Seconds()
	res.LowP50MS, res.LowP99MS = ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100])
	return nil
}

// lowConcurrency is the in-flight count of the closed-loop latency
// phase.
const lowConcurrency = 16

// rawPaced starts n chains of chain publishes at rate chains/s, each
// publish waiting for the one before it, and returns each chain's time
// from its scheduled start to its last acknowledgement, sorted.
func rawPaced(ctx context.Context, js jetstream.JetStream, rate float64, n, chain int, payload []byte, m *meter) ([]time.Duration, error) {
	lat, _, err := openLoop(ctx, rate, n, m, func(i int) error {
		for k := range chain {
			if _, err := js.Publish(ctx, fmt.Sprintf("bench.raw.paced.%d.%d", i, k), payload); err != nil {
				return err
			}
		}
		return nil
	})
	return lat, err
}
