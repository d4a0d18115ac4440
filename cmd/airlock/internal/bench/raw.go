package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// raw publishes n messages of size bytes asynchronously to a stream with
// the events stream's storage settings on a fresh embedded server.
func raw(ctx context.Context, cfg Config, res *Result) (float64, error) {
	n, size := res.RawMsgs, res.RawMsgBytes
	s, err := natsrv.Start(natsrv.Config{DataDir: filepath.Join(cfg.Dir, "raw"), SyncAlways: cfg.SyncAlways})
	if err != nil {
		return 0, err
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	var failed atomic.Int64
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { failed.Add(1) }))
	if err != nil {
		return 0, err
	}
	sc := streams.OpsConfig(streams.Config{})
	sc.Name, sc.Subjects = "BENCH_RAW", []string{"bench.raw.>"}
	if _, err := js.CreateStream(ctx, sc); err != nil {
		return 0, err
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'x'
	}
	// Done is what JetStream acknowledged: published less pending.
	m := cfg.trackAdjusted(PhaseRaw, n, func(published int64) int64 { return published - int64(js.PublishAsyncPending()) })
	defer m.end()
	start := time.Now()
	for i := range n {
		if _, err := js.PublishAsync(fmt.Sprintf("bench.raw.%d", i%1024), payload, jetstream.WithStallWait(time.Minute)); err != nil {
			return 0, err
		}
		m.add(1)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	elapsed := time.Since(start)
	m.end()
	if f := failed.Load(); f > 0 {
		return 0, fmt.Errorf("%d of %d raw publishes failed", f, n)
	}
	if res.Paced > 0 {
		chain := max(1, int(res.MsgsPerOp+0.5))
		lat, err := rawPaced(ctx, js, res.PacedRate, res.Paced, chain, payload, cfg.track(PhaseRawPaced, res.Paced))
		if err != nil {
			return 0, err
		}
		res.RawPacedP50MS, res.RawPacedP99MS = ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100])
	}
	return float64(n) / elapsed.Seconds(), nil
}
