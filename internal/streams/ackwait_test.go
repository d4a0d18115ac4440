package streams_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A shared consumer's ack wait only grows: a process with a shorter claim
// timeout keeps the longer one it finds, and a process whose claim
// timeout another lowered raises it again.
func TestAckWaitOnlyGrows(t *testing.T) {
	_, js := startServer(t)
	ctx := context.Background()
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	create := func(wait time.Duration) time.Duration {
		t.Helper()
		cc := jetstream.ConsumerConfig{Durable: "shared", AckPolicy: jetstream.AckExplicitPolicy, AckWait: wait}
		require.NoError(t, streams.LongerAckWait(ctx, js, streams.Ops, &cc, slog.Default()))
		cons, err := js.CreateOrUpdateConsumer(ctx, streams.Ops, cc)
		require.NoError(t, err)
		return cons.CachedInfo().Config.AckWait
	}
	assert.Equal(t, 3*time.Second, create(3*time.Second), "a new consumer takes the process's")
	assert.Equal(t, 3*time.Second, create(time.Second), "a shorter one keeps the longer")
	assert.Equal(t, 5*time.Second, create(5*time.Second), "a longer one raises it")

	// Lowered behind the back of a process with a 5s claim timeout (an
	// older version, or one that read the consumer before this one wrote).
	cons, err := js.Consumer(ctx, streams.Ops, "shared")
	require.NoError(t, err)
	cc := cons.CachedInfo().Config
	cc.AckWait = time.Second
	_, err = js.UpdateConsumer(ctx, streams.Ops, cc)
	require.NoError(t, err)
	kctx, cancel := context.WithCancel(ctx)
	var keeping sync.WaitGroup
	keeping.Go(func() {
		streams.KeepAckWait(kctx, js, streams.Ops, "shared", 5*time.Second, 20*time.Millisecond, slog.Default())
	})
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Config.AckWait == 5*time.Second
	}, 5*time.Second, 10*time.Millisecond, "raised back to the claim timeout")
	cancel()
	keeping.Wait()

	// ExecutorConsumerFor keeps the longer one too.
	_, err = streams.ExecutorConsumerFor(ctx, js, jetstream.ConsumerConfig{Durable: "shared", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second})
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, info.Config.AckWait)
}
