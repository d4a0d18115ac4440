package executor

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
)

// sweep removes, every SweepInterval until ctx ends, the executor records
// (Keeper) of ops that have ended: the runner forgets an op's records when
// it stores the op's outcome itself, but another instance may end an op
// this one claimed (a recovery after this one crashed or lost its
// connection), and a crash between the outcome and Forget leaves them too.
func (r *Runner) sweep(ctx context.Context) {
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	for {
		r.sweepOnce(ctx)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// sweepOnce forgets the records of every kept op whose newest event is
// terminal. An op in hand here is left alone; a read that fails is tried
// at the next sweep.
func (r *Runner) sweepOnce(ctx context.Context) {
	for _, tool := range r.cfg.Registry.Tools() {
		ex, _ := r.cfg.Registry.Lookup(tool)
		k, ok := ex.(Keeper)
		if !ok {
			continue
		}
		ops, err := k.Kept(ctx)
		if err != nil {
			r.cfg.Logger.Warn("listing the executor's records", "tool", tool, "err", err)
			continue
		}
		for _, op := range ops {
			if ctx.Err() != nil {
				return
			}
			if !events.ValidOpID(op) || r.inflight.busy(op) {
				continue
			}
			last, err := oplog.Last(ctx, r.ops, "*", op)
			switch {
			case errors.Is(err, oplog.ErrEmpty) && r.archivedEnded(op):
				// Ended, and gone from the stream to the archive.
			case err != nil:
				if !errors.Is(err, oplog.ErrEmpty) {
					r.cfg.Logger.Debug("sweep: reading the op", "op", op, "err", err)
				}
				continue
			default:
				if _, terminal := events.OutcomeReply(last.Data); !terminal {
					continue
				}
			}
			if err := k.Forget(ctx, op); err != nil {
				r.cfg.Logger.Warn("sweep: forgetting the op's records", "op", op, "tool", tool, "err", err)
				continue
			}
			r.cfg.Logger.Debug("sweep: records of an ended op removed", "op", op, "tool", tool)
		}
	}
}
