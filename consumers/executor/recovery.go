package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/nats-io/nuid"
)

// unfetched settles a job whose args could not be read: a transient
// failure is retried; args that are gone fail the op if it is still ready.
// An op that moved on is settled from its newest event, as a lost claim
// would be: answered if it ended, recovered (without args) if its claim
// was lost.
func (r *Runner) unfetched(ctx context.Context, ex Executor, j *job) error {
	if events.CodeOf(j.fetch) != events.CodeRequestUnavailable {
		return fmt.Errorf("%w: %w", errNotClaimed, j.fetch)
	}
	if oplog.NotFound(j.fetch) && j.d.n < uint64(r.cfg.RequestTries) {
		// A leader elected a moment ago may not store it yet: read it
		// again before calling it gone.
		return fmt.Errorf("%w: delivery %d of %d: %w", errNotClaimed, j.d.n, r.cfg.RequestTries, j.fetch)
	}
	failed := &events.Failed{OpHeader: hdr(j.d.item), Code: events.CodeRequestUnavailable, Message: j.fetch.Error()}
	_, err := r.append(ctx, j.d.item, j.d.item.ReadySeq, events.TypeFailed, failed)
	switch {
	case err == nil:
		j.log.Error("op failed: its request cannot be read", "code", failed.Code, "err", failed.Message)
		r.answer(j.d.item, failed, nil)
		r.forget(ctx, j.d.item)
		return nil
	case !errors.Is(err, oplog.ErrConflict):
		return fmt.Errorf("%w: %w", errNotClaimed, err)
	}
	j.call = callOf(j.d.item)
	_, err = r.conflict(ctx, ex, j)
	return err
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

// conflict settles a job whose started event, the claim of its attempt,
// was reported lost, from the op's newest event: the event is the job's
// own after all (a read-back lagged its landing: own > 0 is its sequence
// and the call runs), the op moved on, another group took it, a later
// delivery holds it, or an earlier delivery of this very event took it
// and its runner is gone.
func (r *Runner) conflict(ctx context.Context, ex Executor, j *job) (own uint64, err error) {
	last, err := oplog.Last(ctx, r.ops, j.d.item.Workspace, j.d.item.OpID)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errNotClaimed, err)
	}
	if last.Seq <= j.d.item.ReadySeq {
		// The read lags the write that beat our claim (a replica behind
		// the leader): look again later rather than drop the delivery.
		return 0, fmt.Errorf("%w: read of %s is behind its claim", errNotClaimed, j.d.item.OpID)
	}
	lost, err := r.attemptOf(ctx, j.d.item, last)
	if err != nil {
		return 0, err
	}
	if lost == nil {
		j.log.Debug("op already moved on; delivery dropped", "event_type", last.Type)
		r.ended(ctx, j.d.item, last.Data)
		return 0, nil
	}
	c := lost.claim
	switch {
	case lost.started != nil && lost.attempt == j.call.Attempt && j.call.Attempt != "":
		return last.Seq, nil
	case c.WorkSeq != j.d.workSeq || c.Consumer != j.d.consumer:
		return 0, nil // claimed through another work item, or another group
	case (c.Runner == "" || c.Runner == r.id) && c.Delivery >= j.d.n:
		// This runner (or, for claims that name none, some runner) holds
		// a newer delivery of this event. A claim by another runner whose
		// event came back here is lost: that runner stopped heartbeating
		// it, and its delivery count may be from before an unclean stop.
		return 0, errLeave
	}
	if j.call.Attempt == "" {
		j.call.Attempt = nuid.Next()
	}
	return 0, r.recover(ctx, ex, j, lost, last.Seq)
}

// attempt is the attempt an op's newest event belongs to, and its claim.
type attempt struct {
	attempt string
	claim   events.Claim
	// started is the attempt's started event; nil when it has none (a
	// claimed event of an earlier version, never followed by one).
	started *oplog.Event
}

// attemptOf is the attempt of the op's newest event last, when it is a
// claim or a started event; nil when the op has moved on. A started event
// claims the op itself (ADR 0023); one of an earlier version follows a
// claimed event, which is read.
func (r *Runner) attemptOf(ctx context.Context, item work, last *oplog.Event) (*attempt, error) {
	switch d := last.Data.(type) {
	case *events.Claimed:
		return &attempt{attempt: d.Attempt, claim: d.Claim}, nil
	case *events.Started:
		if d.Claim != nil {
			return &attempt{attempt: d.Attempt, claim: *d.Claim, started: last}, nil
		}
		claim, err := oplog.LastOf(ctx, r.ops, opOf(item), events.TypeClaimed)
		if err != nil {
			return nil, fmt.Errorf("%w: the claim of started attempt %s: %w", errNotClaimed, d.Attempt, err)
		}
		cl, ok := claim.Data.(*events.Claimed)
		if !ok || cl.Attempt != d.Attempt {
			return nil, fmt.Errorf("%w: started attempt %s is not the newest claim's (a read behind the leader)", errNotClaimed, d.Attempt)
		}
		return &attempt{attempt: d.Attempt, claim: cl.Claim, started: last}, nil
	}
	return nil, nil
}

// recover settles an op whose attempt was taken by a runner that is gone;
// last is the op's newest sequence. An attempt that never started (a
// claimed event of an earlier version alone) is run again at once: a
// started event would have been stored before any effect. One that
// started goes to the executor's Recover.
func (r *Runner) recover(ctx context.Context, ex Executor, j *job, a *attempt, last uint64) error {
	item, call := j.d.item, j.call
	c := a.claim
	lost := Lost{
		Attempt: a.attempt, Instance: c.Instance, Host: c.Host, Runner: c.Runner,
		Own: c.Instance != "" && c.Instance == r.cfg.Instance,
	}
	log := j.log.With("attempt", lost.Attempt, "instance", lost.Instance, "host", lost.Host)
	rec := Recovery{Action: Rerun}
	// A claim that names no instance was made by a version that wrote no
	// started events: its attempt may have run, and by any instance.
	inDoubt := a.started != nil || c.Instance == ""
	if inDoubt {
		if a.started != nil {
			lost.StartedAt = a.started.Time
			lost.Evidence = a.started.Data.(*events.Started).Evidence
		}
		var err error
		if rec, err = ex.Recover(ctx, call, lost); err != nil {
			return fmt.Errorf("recover %s: %w", item.OpID, err)
		}
	}
	log.Info("recovering lost attempt", "started", a.started != nil, "in_doubt", inDoubt, "own", lost.Own, "action", rec.Action)
	switch rec.Action {
	case Defer:
		if !lost.Own && j.d.n < c.Delivery+1+uint64(r.cfg.OwnerTries) {
			left := c.Delivery + 1 + uint64(r.cfg.OwnerTries) - j.d.n
			until := time.Now().Add(time.Duration(left) * r.cfg.OwnerRetryDelay).UTC().Format(time.RFC3339)
			return fmt.Errorf("%w: waiting for instance %s (host %s) to settle attempt %s from its own records, delivery %d of %d; ambiguous after about %s",
				errDefer, lost.Instance, lost.Host, lost.Attempt, j.d.n-c.Delivery, r.cfg.OwnerTries, until)
		}
		fallthrough
	case Ambiguous:
		amb := &events.Ambiguous{OpHeader: hdr(item), Attempt: lost.Attempt, Code: events.CodeAmbiguous,
			Known: describeLost(lost) + ": " + rec.Known, Instance: lost.Instance, Host: lost.Host}
		return r.terminal(ctx, item, last, events.TypeAmbiguous, amb, nil)
	case Done:
		if !inDoubt {
			return fmt.Errorf("recover %s: Done for an attempt that never started", item.OpID)
		}
		call.Attempt = lost.Attempt
		return r.record(ctx, call, item, last, rec.Result, nil, 0, true)
	case Rerun:
	default:
		return fmt.Errorf("recover %s: unknown action %v", item.OpID, rec.Action)
	}
	if call.Args == nil {
		// Nothing ran, and nothing can: the request is gone.
		failed := &events.Failed{OpHeader: hdr(item), Attempt: lost.Attempt, Code: events.CodeRequestUnavailable,
			Message: fmt.Sprintf("the lost attempt %s took no effect, and the request message %d is gone", lost.Attempt, item.RequestSeq)}
		log.Error("op failed: its request cannot be read", "code", failed.Code)
		return r.terminal(ctx, item, last, events.TypeFailed, failed, nil)
	}
	return r.run(ctx, ex, j, last, lost.Attempt)
}

// describeLost names a lost attempt and who held it, for an ambiguous
// outcome.
func describeLost(l Lost) string {
	who := "an instance that recorded no name"
	if l.Instance != "" {
		who = "instance " + l.Instance
		if l.Host != "" {
			who += " on host " + l.Host
		}
	}
	s := fmt.Sprintf("attempt %s of %s", l.Attempt, who)
	if !l.StartedAt.IsZero() {
		s += ", started " + l.StartedAt.UTC().Format(time.RFC3339Nano)
	}
	return s
}
