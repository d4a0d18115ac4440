package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/apptest"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// BenchmarkProject applies a stream of echo ops run to completion (the
// ops `airlock bench` makes) to a fresh store with the audit log signed, as
// serve runs it: JetStream's delivery, decoding, leaves and Pebble. It
// reports the cost per stream message.
func BenchmarkProject(b *testing.B) {
	n := testenv.StartNATS(b, streams.Config{})
	fillEcho(b, n, 5000)
	until := lastOpSeq(b, n)
	key, _, err := audit.LoadOrCreateKey(b.TempDir())
	require.NoError(b, err)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		st, err := store.Open(fmt.Sprintf("%s/%d", b.TempDir(), i))
		require.NoError(b, err)
		p, err := projector.New(projector.Config{JetStream: n.JetStream, Store: st, AuditKey: key})
		require.NoError(b, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
		require.NoError(b, p.WaitApplied(wctx, until))
		wcancel()
		cancel()
		require.NoError(b, <-done)
		require.NoError(b, st.Close())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(until), "ns/msg")
}

// fillEcho runs ops echo ops through a whole Airlock on n, 64 at a time,
// and stops it.
func fillEcho(b *testing.B, n *testenv.NATS, ops int) {
	a := apptest.StartApp(b, app.Config{NATSURL: n.Server.ClientURL(), Logger: slog.New(slog.DiscardHandler)})
	c, _ := apptest.Client(b, a.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var next atomic.Int64
	var g errgroup.Group
	for range 64 {
		g.Go(func() error {
			for i := next.Add(1); i <= int64(ops); i = next.Add(1) {
				out, err := c.Submit(ctx, events.Request{Workspace: "bench", Agent: "bench", Tool: "echo",
					Args: json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"hello from the benchmark"}`, i))})
				if err != nil {
					return err
				}
				if out.State != events.StateCompleted {
					return fmt.Errorf("op %s: %s", out.OpID, out.State)
				}
			}
			return nil
		})
	}
	require.NoError(b, g.Wait())
	require.NoError(b, a.Shutdown(ctx))
}
