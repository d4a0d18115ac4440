package gate

// Retries of archived ops (ADR 0026): an op that ended and left the ops
// stream for the archive leaves nothing under its subjects, so a retry's
// first event is stored. The gate ends it with the archived outcome before
// anything acts on it, and answers the retry as it would have answered it
// while the op's events were in the stream.

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
)

// settleArchived makes the archive's ops known before a batch's first
// events, stored at seqs, are acted on: one Settle covers every append
// acknowledged before it. It returns Settle's error; nil without an
// archive or when nothing was appended.
func (g *Gate) settleArchived(ctx context.Context, seqs []uint64, errs []error) error {
	if g.cfg.Archived == nil {
		return nil
	}
	upTo := uint64(0)
	for i, err := range errs {
		if err == nil {
			upTo = max(upTo, seqs[i])
		}
	}
	if upTo == 0 {
		return nil
	}
	return g.cfg.Archived.Settle(ctx, time.Now(), upTo)
}

// archivedRetry settles a with its first event stored at seq when that
// event is a retry of an archived op, or when whether it is cannot be told
// (settled is Settle's error: the request is taken again later). It
// reports whether it settled a.
func (g *Gate) archivedRetry(ctx context.Context, a *admission, seq uint64, settled error) bool {
	var op *events.Op
	err := settled
	if err == nil {
		op, err = g.cfg.Archived.Duplicate(a.opID, seq)
	}
	if err == nil && op == nil {
		return false
	}
	a.giveBack()
	if a.offered {
		g.cfg.Handoff.Take(a.opID, a.reqSeq)
	}
	if err != nil {
		g.retry(a.m, "tell a retry of an archived op "+a.opID, err)
		return true
	}
	r, err := g.restate(ctx, op, seq)
	if err != nil {
		g.retry(a.m, "restate archived op "+a.opID, err)
		return true
	}
	g.cfg.Logger.Info("retry of an archived op answered with its outcome", "op", a.opID, "ws", a.req.Workspace, "state", r.State, "retry_seq", seq)
	g.reply(replyTo(a.m), r)
	// The op read its args from the request that made it, erased long
	// ago; this copy is needed by nobody.
	if err := g.erase(ctx, a.m, a.reqSeq); err != nil {
		return true
	}
	_ = a.m.Ack()
	return true
}

// restate ends the retry of the archived op op, whose newest event is at
// expect, with op's outcome, and returns the answer to the retry. When
// another process ended it first, the answer is read from the stream.
func (g *Gate) restate(ctx context.Context, op *events.Op, expect uint64) (events.Reply, error) {
	_, data, err := g.cfg.Archived.Restate(ctx, op, expect)
	if errors.Is(err, oplog.ErrConflict) {
		last, lerr := oplog.Last(ctx, g.ops, op.Workspace, op.ID)
		if lerr != nil {
			return events.Reply{}, lerr
		}
		if _, ended := events.OutcomeReply(last.Data); !ended {
			return events.Reply{}, err
		}
		data, err = last.Data, nil
	}
	if err != nil {
		return events.Reply{}, err
	}
	r, ok := events.StatusReply(data)
	if !ok {
		r = events.Reply{OpID: op.ID, State: op.State}
	}
	r.Existing = true
	if c, ok := data.(*events.Completed); ok {
		if err := g.attachResult(ctx, &r, c); err != nil {
			return events.Reply{}, err
		}
	}
	return r, nil
}

// archivedOp is the projection's op opID when it has ended: an op the ops
// stream holds nothing of went to the archive then. nil otherwise.
func (g *Gate) archivedOp(opID string) *events.Op {
	if g.cfg.Archived == nil {
		return nil
	}
	// Any sequence: the op's record says whether it ended.
	op, err := g.cfg.Archived.Duplicate(opID, math.MaxUint64)
	if err != nil {
		return nil
	}
	return op
}

// archivedExisting answers a retry of an archived op from what the ops
// stream holds of it now: the first event of an earlier retry that was
// never ended (its gate stopped before it could), which it ends now; or an
// erasure of the op's result stored after its events left, which the
// projection's op answers with. ok is false when the op is not archived.
func (g *Gate) archivedExisting(ctx context.Context, opID string, last *oplog.Event) (found, bool, error) {
	if g.cfg.Archived == nil {
		return found{}, false, nil
	}
	if last.Type == events.TypeResultErased {
		ws, _, _, _, _ := events.OpSubjectParts(last.Subject)
		first, err := oplog.First(ctx, g.ops, ws, opID)
		if err == nil && first.Type.First() {
			return found{}, false, nil // the op's own events are there
		}
		// The op's events left, before or after its erasure was stored:
		// the projection must hold every op with an event below it.
		if err := g.cfg.Archived.SettleThrough(ctx, time.Now(), last.Seq); err != nil {
			return found{}, false, err
		}
		if op := g.archivedOp(opID); op != nil {
			return found{reqSeq: op.RequestSeq, reply: events.Reply{
				OpID: op.ID, State: op.State, Existing: true, ResultDigest: op.ResultDigest, ResultBytes: op.ResultBytes,
				Code: op.ErrorCode, Message: op.Error, Erased: op.ResultErased,
			}}, true, nil
		}
		return found{}, false, nil
	}
	if !last.Type.First() {
		return found{}, false, nil
	}
	if err := g.cfg.Archived.Settle(ctx, time.Now(), last.Seq); err != nil {
		return found{}, false, err
	}
	op, err := g.cfg.Archived.Duplicate(opID, last.Seq)
	if err != nil || op == nil {
		return found{}, false, err
	}
	r, err := g.restate(ctx, op, last.Seq)
	if err != nil {
		return found{}, false, err
	}
	// The archived op's request, not this one's, made it: this one is a
	// copy.
	return found{reply: r, reqSeq: op.RequestSeq}, true, nil
}
