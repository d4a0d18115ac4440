package pull

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// BatchHandler settles every message of a batch before returning.
type BatchHandler func(ctx context.Context, msgs []jetstream.Msg)

// Config configures Batches.
type Config struct {
	// Loops is how many batches are in hand at once.
	Loops int
	// Max bounds the messages of one batch.
	Max int
	// Heartbeat, when positive, is how often every message received and
	// not yet handled is marked in progress, from the moment it arrives
	// (waiting in the buffer included) until its handler returns, so that
	// JetStream never redelivers a message this process still holds. Set
	// it well below the consumer's AckWait.
	Heartbeat time.Duration
}

// Batches feeds cons's messages to cfg.Loops concurrent handlers, each
// taking what has arrived (at least one message, at most cfg.Max) as one
// batch. Under load batches grow, so per-batch round trips are shared by
// many messages; when idle a single message goes through at once. It
// returns when ctx ends, after the handlers finish their batches.
func Batches(ctx context.Context, cons jetstream.Consumer, cfg Config, h BatchHandler) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(cfg.Loops*cfg.Max), jetstream.PullExpiry(streams.PullExpiry),
		// Missed heartbeats (a consumer leader lost) make the iterator
		// pull again, from the new leader, and are no error.
		jetstream.WithMessagesErrOnMissingHeartbeat(false))
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	held := &Held{}
	// The beats go on until every handler has returned, after ctx ends
	// too: a handler still running a call must not see its messages
	// delivered again elsewhere because its process is stopping.
	bctx, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	var beats sync.WaitGroup
	defer func() {
		stopBeats()
		beats.Wait()
	}()
	if cfg.Heartbeat > 0 {
		beats.Go(func() { held.BeatEvery(bctx, cfg.Heartbeat) })
	}
	msgs := make(chan jetstream.Msg, cfg.Loops*cfg.Max)
	g, gctx := errgroup.WithContext(ctx)
	for range cfg.Loops {
		g.Go(func() error {
			for {
				m, ok := <-msgs
				if !ok {
					return nil
				}
				if gctx.Err() != nil {
					// Stopping: what was received and not begun goes
					// back at once, for a process that goes on.
					_ = m.Nak()
					held.Drop(m)
					continue
				}
				batch := []jetstream.Msg{m}
			fill:
				for len(batch) < cfg.Max {
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
				held.Drop(batch...)
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
			held.Add(m)
			select {
			case msgs <- m:
			case <-ctx.Done():
				return nil
			}
		}
	})
	return g.Wait()
}

// Held is a set of messages kept in progress: received and not yet
// settled. Batches keeps one of the messages it has received and not yet
// handed over; a caller keeps one of the messages it holds past its
// handler (the gate: the requests of the ops its process runs). The zero
// value is ready to use.
type Held struct {
	mu   sync.Mutex
	msgs map[jetstream.Msg]struct{}
}

// Add puts m in the set.
func (h *Held) Add(m jetstream.Msg) {
	h.mu.Lock()
	if h.msgs == nil {
		h.msgs = map[jetstream.Msg]struct{}{}
	}
	h.msgs[m] = struct{}{}
	h.mu.Unlock()
}

// Drop takes ms out of the set.
func (h *Held) Drop(ms ...jetstream.Msg) {
	h.mu.Lock()
	for _, m := range ms {
		delete(h.msgs, m)
	}
	h.mu.Unlock()
}

// Beat marks every message of the set in progress, once.
func (h *Held) Beat() {
	h.mu.Lock()
	ms := make([]jetstream.Msg, 0, len(h.msgs))
	for m := range h.msgs {
		ms = append(ms, m)
	}
	h.mu.Unlock()
	for _, m := range ms {
		_ = m.InProgress()
	}
}

// BeatEvery marks every message of the set in progress every period,
// until ctx ends.
func (h *Held) BeatEvery(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			h.Beat()
		case <-ctx.Done():
			return
		}
	}
}
