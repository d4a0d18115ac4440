package streams_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A consumer made again while its delete is still under way is made, not
// refused: the server answers "consumer does not exist" to a create that
// finds the consumer closed but not yet let go of, and AwaitConsumer tries
// again. Each round races a delete with a create; on its own, the create
// loses that race within a hundred rounds or so.
func TestAwaitConsumerWaitsOutADelete(t *testing.T) {
	_, js := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, streams.Provision(ctx, js, streams.Config{}))
	log := slog.New(slog.DiscardHandler)
	for round := range 200 {
		// A name a round: a create that lands after the server has let go
		// of the consumer but before it has removed its directory makes a
		// consumer whose directory is then removed (the server's race, not
		// this one), which the next update of that name would meet.
		cfg := jetstream.ConsumerConfig{Durable: fmt.Sprintf("race-%d", round), FilterSubject: "airlock.v1.op.>", AckPolicy: jetstream.AckExplicitPolicy}
		create := func(ctx context.Context) (jetstream.Consumer, error) {
			return js.CreateOrUpdateConsumer(ctx, streams.Ops, cfg)
		}
		_, err := create(ctx)
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := js.DeleteConsumer(ctx, streams.Ops, cfg.Durable)
			if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("round %d: delete: %v", round, err)
			}
		}()
		cons, err := streams.AwaitConsumer(ctx, log, cfg.Durable, create)
		wg.Wait()
		require.NoError(t, err, "round %d", round)
		assert.Equal(t, cfg.Durable, cons.CachedInfo().Name)
	}
}
