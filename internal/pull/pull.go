// Package pull runs a fixed pool of workers over a JetStream pull consumer.
package pull

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Handler settles one message: it acks, naks or terms it before returning.
type Handler func(ctx context.Context, m jetstream.Msg)

// Work feeds cons's messages to n workers running h until ctx ends, then
// waits for the workers to finish their messages. Messages in hand but not
// started are left unacked and redelivered after AckWait.
func Work(ctx context.Context, cons jetstream.Consumer, n int, h Handler) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(n))
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	msgs := make(chan jetstream.Msg)
	g, gctx := errgroup.WithContext(ctx)
	for range n {
		g.Go(func() error {
			for m := range msgs {
				h(gctx, m)
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(msgs)
		for {
			m, err := it.Next()
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("pull: next: %w", err)
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return nil
			}
		}
	})
	return g.Wait()
}
