package streams_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The directory of what is served reads the durable consumers that take
// decided events, and a miss always reads them again.
func TestServed(t *testing.T) {
	_, js := startServer(t)
	ctx := context.Background()
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	s := streams.NewServed(js, slog.Default())
	assert.False(t, s.Serves(ctx, "a", "exec"), "no executor consumer yet")

	create := func(name string, filters ...string) {
		t.Helper()
		_, err := streams.ExecutorConsumerFor(ctx, js, jetstream.ConsumerConfig{Durable: name, FilterSubjects: filters, AckPolicy: jetstream.AckExplicitPolicy})
		require.NoError(t, err)
	}
	create("host-a-exec", events.ReadySubject("a", "exec"), events.ReadySubject("b", "exec"))
	assert.True(t, s.Serves(ctx, "a", "exec"), "a miss reads the consumers again")
	assert.True(t, s.Serves(ctx, "b", "exec"))
	assert.False(t, s.Serves(ctx, "c", "exec"))
	assert.False(t, s.Serves(ctx, "a", "apply_patch"))

	create("airlock-exec-echo", events.ReadySubjects("echo"))
	assert.True(t, s.Serves(ctx, "c", "echo"), "every workspace")

	// An ordered (ephemeral) consumer of everything serves nothing.
	_, err := js.OrderedConsumer(ctx, streams.Ops, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	assert.False(t, s.Serves(ctx, "c", "exec"))

	// A group may not take other workspaces than its consumer does.
	_, err = streams.ExecutorConsumerFor(ctx, js, jetstream.ConsumerConfig{Durable: "host-a-exec", FilterSubjects: []string{events.ReadySubject("a", "exec")}, AckPolicy: jetstream.AckExplicitPolicy})
	require.True(t, errors.Is(err, streams.ErrGroupMismatch), "%v", err)

	// JetStream that does not answer: the op waits rather than being
	// denied.
	js.Conn().Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	assert.True(t, s.Serves(cctx, "z", "exec"))
}
