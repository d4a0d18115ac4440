// Package pull feeds a JetStream pull consumer's messages to handlers in
// batches.
package pull

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// BatchHandler settles every message of a batch before returning.
type BatchHandler func(ctx context.Context, msgs []jetstream.Msg)

// Batches feeds cons's messages to loops concurrent handlers, each taking
// what has arrived (at least one message, at most max) as one batch. Under
// load batches grow, so per-batch round trips are shared by many messages;
// when idle a single message goes through at once. It returns when ctx ends,
// after the handlers finish their batches.
func Batches(ctx context.Context, cons jetstream.Consumer, loops, max int, h BatchHandler) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(loops * max))
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	msgs := make(chan jetstream.Msg, loops*max)
	g, gctx := errgroup.WithContext(ctx)
	for range loops {
		g.Go(func() error {
			for {
				m, ok := <-msgs
				if !ok {
					return nil
				}
				batch := []jetstream.Msg{m}
			fill:
				for len(batch) < max {
					select {
					case m, ok := <-msgs:
						if !ok {
							break fill
						}
						batch = append(batch, m)
					default:
						break fill
					}
				}
				h(gctx, batch)
			}
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
