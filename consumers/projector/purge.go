package projector

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// catchUpWait bounds how long a sweep waits for the projection to fold
// what the ops stream held when the sweep looked, before it gives up the
// purge for that sweep.
const catchUpWait = 2 * time.Second

// purge removes from AIRLOCK_REQUESTS, in one purge, every message below
// the purge floor, and returns the floor; 0 when it purged nothing (the
// stream denies purges, as streams made by versions before it do, or the
// floor cannot be told). Failures are logged: the sweep then deletes each
// request on its own, as it would have.
func (s *Scrubber) purge(ctx context.Context, st jetstream.Stream) uint64 {
	if st.CachedInfo().Config.DenyPurge {
		return 0
	}
	floor, err := s.purgeFloor(ctx)
	if err != nil {
		s.cfg.Logger.Debug("request purge skipped", "err", err)
		return 0
	}
	if floor <= 1 {
		return 0
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(floor)); err != nil {
		s.cfg.Logger.Warn("request purge failed; deleting one by one", "below", floor, "err", err)
		return 0
	}
	s.purges.Add(1)
	s.cfg.Logger.Debug("requests purged", "below", floor)
	return floor
}

// purgeFloor is the lowest request sequence something may still need:
// every request message below it is one the gate has settled (its op's
// first event stored, or the request rejected or found a copy, which the
// gate erases itself) whose op the projection holds as neither ready nor
// executing. Such a request is the op's that ended, or a held op's, which
// the gate moved to AIRLOCK_HELD before it settled it.
//
// The gate's durable consumer says what it has settled: its acknowledgement
// floor. It acknowledges a request only once the op's first event is
// stored, so once the projection has folded the ops stream as it was
// after that floor was read, it holds every such op, and its ready and
// executing ops bound the rest (store.LiveRequestFloor). Each process
// computes the floor from its own projection; each is safe alone.
func (s *Scrubber) purgeFloor(ctx context.Context) (uint64, error) {
	js := s.cfg.JetStream
	gate, err := js.Consumer(ctx, streams.Requests, streams.GateConsumer)
	if err != nil {
		return 0, fmt.Errorf("gate consumer: %w", err)
	}
	gi, err := gate.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("gate consumer: %w", err)
	}
	settled := gi.AckFloor.Stream
	ops, err := js.Stream(ctx, streams.Ops)
	if err != nil {
		return 0, err
	}
	oi, err := ops.Info(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.caughtUp(ctx, oi.State.LastSeq); err != nil {
		return 0, err
	}
	live, err := s.cfg.Store.LiveRequestFloor()
	if err != nil {
		return 0, err
	}
	return min(settled+1, live), nil
}

// caughtUp waits, at most catchUpWait, until the projection has applied
// the ops stream up to seq.
func (s *Scrubber) caughtUp(ctx context.Context, seq uint64) error {
	deadline := time.Now().Add(catchUpWait)
	for {
		applied, err := s.cfg.Store.Applied()
		if err != nil {
			return err
		}
		if applied >= seq {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the projection is at %d, behind %d", applied, seq)
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
