package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
)

// unfetched settles a job whose args could not be read: a transient
// failure is retried; args that are gone fail the op if it is still ready.
// An op that moved on (its request erased once it ended, say) is answered
// with its stored outcome, as a lost claim would be.
func (r *Runner) unfetched(ctx context.Context, j *job) error {
	if events.CodeOf(j.fetch) != events.CodeRequestUnavailable {
		return fmt.Errorf("%w: %w", errNotClaimed, j.fetch)
	}
	failed := &events.Failed{OpHeader: hdr(j.d.item), Code: events.CodeRequestUnavailable, Message: j.fetch.Error()}
	_, err := r.append(ctx, j.d.item, j.d.item.ReadySeq, events.TypeFailed, failed)
	switch {
	case err == nil:
		r.answer(j.d.item, failed, nil)
		r.forget(ctx, j.d.item)
		return nil
	case !errors.Is(err, oplog.ErrConflict):
		return fmt.Errorf("%w: %w", errNotClaimed, err)
	}
	last, err := oplog.Last(ctx, r.ops, j.d.item.Workspace, j.d.item.OpID)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotClaimed, err)
	}
	if last.Seq <= j.d.item.ReadySeq {
		return fmt.Errorf("%w: read of %s is behind its conflict", errNotClaimed, j.d.item.OpID)
	}
	r.ended(ctx, j.d.item, last.Data)
	return nil
}

// ended settles a delivery whose op has moved on: if the op has ended, the
// stored outcome goes to the reply subject and the executor's records of
// the op go (a crash between the terminal event and Forget left them).
func (r *Runner) ended(ctx context.Context, item work, data any) {
	if _, terminal := events.OutcomeReply(data); !terminal {
		return
	}
	r.answer(item, data, nil)
	r.forget(ctx, item)
}

// conflict settles a job whose claim was reported lost, from one read of
// the op's newest event: the claim is the job's own after all (a read-back
// lagged its landing: own > 0 is its sequence and the job runs), the op
// moved on, another group claimed it, a later delivery holds the claim, or
// an earlier delivery of this very event claimed it and its runner is gone.
func (r *Runner) conflict(ctx context.Context, ex Executor, j *job) (own uint64, err error) {
	last, err := oplog.Last(ctx, r.ops, j.d.item.Workspace, j.d.item.OpID)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errNotClaimed, err)
	}
	c, ok := last.Data.(*events.Claimed)
	switch {
	case ok && c.Attempt == j.call.Attempt:
		return last.Seq, nil
	case last.Seq <= j.d.item.ReadySeq:
		// The read lags the write that beat our claim (a replica behind
		// the leader): look again later rather than drop the delivery.
		return 0, fmt.Errorf("%w: read of %s is behind its claim", errNotClaimed, j.d.item.OpID)
	case !ok:
		j.log.Debug("op already moved on; delivery dropped", "event_type", last.Type)
		r.ended(ctx, j.d.item, last.Data)
		return 0, nil
	case c.WorkSeq != j.d.workSeq || c.Consumer != streams.ExecutorConsumer(r.cfg.Group, ex.Tool()):
		return 0, nil // claimed through another decided event, or another group
	case (c.Runner == "" || c.Runner == r.id) && c.Delivery >= j.d.n:
		// This runner (or, for claims that name none, some runner) holds
		// a newer delivery of this event. A claim by another runner whose
		// event came back here is lost: that runner stopped heartbeating
		// it, and its delivery count may be from before an unclean stop.
		return 0, errLeave
	}
	claim := r.claimEvent(ex, j)
	claim.Recovers = c.Attempt
	return 0, r.recover(ctx, ex, j.call, j.d.item, claim, last.Seq, j.log)
}

// recover settles an op whose attempt claim.Recovers was claimed by a runner that is
// gone, as the executor decides.
func (r *Runner) recover(ctx context.Context, ex Executor, call Call, item work, claim *events.Claimed, expect uint64, log *slog.Logger) error {
	lost := claim.Recovers
	rec, err := ex.Recover(ctx, call, lost)
	if err != nil {
		return fmt.Errorf("recover %s: %w", item.OpID, err)
	}
	log.Info("recovering lost attempt", "attempt", lost, "action", rec.Action)
	if rec.Action == Ambiguous {
		amb := &events.Ambiguous{OpHeader: hdr(item), Attempt: lost, Code: events.CodeAmbiguous, Known: rec.Known}
		return r.terminal(ctx, item, expect, events.TypeAmbiguous, amb, nil)
	}
	seq, err := r.append(ctx, item, expect, events.TypeClaimed, claim)
	if errors.Is(err, oplog.ErrConflict) {
		return nil // another runner recovered it
	}
	if err != nil {
		return err
	}
	if rec.Action == Done {
		return r.record(ctx, call, item, seq, rec.Result, nil, 0, true)
	}
	return r.execute(ctx, ex, call, item, seq, true)
}
