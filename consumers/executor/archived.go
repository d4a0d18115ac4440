package executor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
)

// archived settles the jobs of a batch whose decided event belongs to a
// retry of an op that left the ops stream for the archive (ADR 0026): the
// op ran, or ended, before; its outcome is stated again and answered, and
// nothing runs. It returns the other jobs. When whether a job's op is
// archived cannot be told, the job goes back, to be taken again.
func (r *Runner) archived(ctx context.Context, jobs []*job) []*job {
	a := r.cfg.Archived
	if a == nil {
		return jobs
	}
	// Every decided event of the batch was delivered before now; each
	// op's first event is below its decided event.
	upTo := uint64(0)
	for _, j := range jobs {
		upTo = max(upTo, j.d.item.ReadySeq)
	}
	if err := a.Settle(ctx, time.Now(), upTo); err != nil {
		for _, j := range jobs {
			j.err = fmt.Errorf("%w: %w", errNotClaimed, err)
			r.settle(j)
			r.inflight.release(j.d.item.OpID)
		}
		return nil
	}
	keep := jobs[:0]
	for _, j := range jobs {
		op, err := a.Duplicate(j.d.item.OpID, j.d.item.ReadySeq)
		if err == nil && op == nil {
			keep = append(keep, j)
			continue
		}
		if err == nil {
			err = r.restate(ctx, j, op)
		}
		if err != nil {
			j.err = fmt.Errorf("%w: %w", errNotClaimed, err)
		}
		r.settle(j)
		r.inflight.release(j.d.item.OpID)
	}
	return keep
}

// restate ends the retry of the archived op op that j's decided event
// belongs to with op's outcome, and answers it. Another process (the gate
// that admitted the retry) may have ended it first: the op's newest event
// then says so.
func (r *Runner) restate(ctx context.Context, j *job, op *events.Op) error {
	item := j.d.item
	_, data, err := r.cfg.Archived.Restate(ctx, op, item.ReadySeq)
	if errors.Is(err, oplog.ErrConflict) {
		last, lerr := oplog.Last(ctx, r.ops, item.Workspace, item.OpID)
		if lerr != nil {
			return lerr
		}
		if _, ended := events.OutcomeReply(last.Data); !ended {
			return err
		}
		data, err = last.Data, nil
	}
	if err != nil {
		return err
	}
	j.log.Info("retry of an archived op answered with its outcome; nothing ran", "retry_seq", item.ReadySeq)
	r.answer(item, data, nil)
	return nil
}

// archivedEnded reports whether the projection holds op as ended: an op
// whose events the ops stream no longer holds went to the archive once it
// ended (ADR 0026).
func (r *Runner) archivedEnded(op string) bool {
	if r.cfg.Archived == nil {
		return false
	}
	// Any sequence: the op's record says whether it ended.
	o, err := r.cfg.Archived.Duplicate(op, math.MaxUint64)
	return err == nil && o != nil
}
