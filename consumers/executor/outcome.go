package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/oplog"
)

// answer sends a terminal event's outcome to the request's reply inbox.
// result is the result the runner holds in memory for a completed event
// it stored itself (nil otherwise): the event carries its digest alone,
// and the copy kept for retries is sealed to the agent (Config.Results).
func (r *Runner) answer(item work, data any, result json.RawMessage) {
	if !events.ValidReplyTo(item.ReplyTo, item.Agent) {
		return
	}
	reply, ok := events.OutcomeReply(data)
	if !ok {
		return
	}
	if result != nil && reply.State == events.StateCompleted && len(result) == reply.ResultBytes {
		reply.Result = result
	}
	body, err := events.MarshalJSON(reply)
	if err == nil {
		err = r.cfg.JetStream.Conn().Publish(item.ReplyTo, body)
	}
	if err != nil {
		r.cfg.Logger.Debug("reply", "op", item.OpID, "subject", item.ReplyTo, "err", err)
	}
}

// record appends completed or failed for the attempt, expecting the op at
// expect. It keeps trying a failed append, with backoff, for RecordFor (a
// node lost, a leader being elected), while the delivery's heartbeat keeps
// other runners off; a conflict means the op was recovered by another
// runner and this attempt's outcome no longer counts.
func (r *Runner) record(ctx context.Context, call Call, item work, expect uint64, result json.RawMessage, xerr error, took time.Duration, recovered bool) error {
	typ, data, kept := outcome(call, item, result, xerr, took, recovered)
	deadline := time.Now().Add(r.cfg.RecordFor)
	if c, ok := data.(*events.Completed); ok && r.cfg.Results != nil {
		if err := r.keep(ctx, call, item, c, kept, deadline); err != nil {
			return err
		}
	}
	wait := 50 * time.Millisecond
	for {
		err := r.terminal(ctx, item, expect, typ, data, kept)
		if err == nil || errors.Is(err, errLeave) {
			return err
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("record %s of %s (kept trying for %s): %w", typ.Short(), item.OpID, r.cfg.RecordFor, err)
		}
		r.cfg.Logger.Warn("outcome not stored yet; trying again", "op", item.OpID, "event_type", typ, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("record %s of %s: %w", typ.Short(), item.OpID, ctx.Err())
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// ResultKeeper stores a completed op's result, sealed to the agent that
// asked, and returns until when it is kept (Until nil: not kept, for a
// retention of zero or an agent with no key) and its sequence, which the
// completed event names. It is called before the completed event is
// appended, and again (same attempt) when that append is tried again
// after a crash: storing the same attempt's result twice must be
// harmless.
type ResultKeeper interface {
	Keep(ctx context.Context, r KeptResult) (StoredResult, error)
}

// StoredResult is where and until when a ResultKeeper stored a result
// (events.StoredResult).
type StoredResult = events.StoredResult

// KeptResult is what a ResultKeeper stores (events.KeptResult).
type KeptResult = events.KeptResult

// keep stores the result before the completed event that counts it,
// trying until deadline: a result that cannot be stored keeps the op out
// of completed, and recovery settles it from the executor's records.
func (r *Runner) keep(ctx context.Context, call Call, item work, c *events.Completed, result []byte, deadline time.Time) error {
	ret := events.Retention{TTLSeconds: int64(events.DefaultResultTTL / time.Second)}
	if item.Results != nil {
		ret = *item.Results
	}
	kr := KeptResult{Workspace: item.Workspace, OpID: item.OpID, Attempt: call.Attempt, Agent: item.Agent, Result: result, Retention: ret}
	wait := 50 * time.Millisecond
	for {
		kept, err := r.cfg.Results.Keep(ctx, kr)
		if err == nil {
			c.KeptUntil, c.ResultSeq = kept.Until, kept.Seq
			c.EraseOnDelivery = kept.Until != nil && ret.EraseOnDelivery
			failpoint.Hit(failpoint.AfterResultKept, item.Tool)
			return nil
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("keep the result of %s (kept trying for %s): %w", item.OpID, r.cfg.RecordFor, err)
		}
		r.cfg.Logger.Warn("result not stored yet; trying again", "op", item.OpID, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("keep the result of %s: %w", item.OpID, ctx.Err())
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// terminal appends a terminal event expecting the op at expect and answers
// the reply inbox once it is stored, with result for a completed event. A
// lost compare-and-swap is not an error: another runner settled the op,
// and this event no longer counts.
func (r *Runner) terminal(ctx context.Context, item work, expect uint64, t events.Type, data any, result json.RawMessage) error {
	err := r.appendTerminal(ctx, item, expect, t, data, result)
	if errors.Is(err, oplog.ErrConflict) {
		return r.settledElsewhere(ctx, item)
	}
	return err
}

// appendTerminal is terminal with a lost compare-and-swap returned as
// an error wrapping oplog.ErrConflict, for the caller to settle.
func (r *Runner) appendTerminal(ctx context.Context, item work, expect uint64, t events.Type, data any, result json.RawMessage) error {
	if _, err := r.append(ctx, item, expect, t, data); err != nil {
		return err
	}
	if f, ok := data.(*events.Failed); ok {
		r.cfg.Logger.Warn("op failed", "op", item.OpID, "ws", item.Workspace, "code", f.Code, "err", f.Message)
	}
	r.answer(item, data, result)
	failpoint.Hit(failpoint.AfterResult, item.Tool)
	r.forget(ctx, item)
	return nil
}

// settledElsewhere settles a delivery whose append lost to another
// runner's, which settled the op or is settling it (a recovery that took
// this attempt for lost): an op that has ended is acked (nil); one that
// has not is left to the runner that holds it now (errLeave), whose own
// delivery of the decided event settles it, and is redelivered if that
// runner is lost too.
func (r *Runner) settledElsewhere(ctx context.Context, item work) error {
	last, err := oplog.Last(ctx, r.ops, item.Workspace, item.OpID)
	if err == nil {
		if _, ended := events.OutcomeReply(last.Data); ended {
			return nil
		}
	}
	return errLeave
}

// outcome builds the terminal event for an execution and, for completed,
// returns the compacted result the event describes (its digest and size):
// the caller keeps it sealed for the agent (keep) and puts it into the
// reply.
func outcome(call Call, item work, result json.RawMessage, xerr error, took time.Duration, recovered bool) (events.Type, any, json.RawMessage) {
	failed := func(code events.Code, msg string) (events.Type, any, json.RawMessage) {
		return events.TypeFailed, &events.Failed{OpHeader: hdr(item), Attempt: call.Attempt, Code: code, Message: msg}, nil
	}
	if xerr != nil {
		var e *events.Error
		if errors.As(xerr, &e) && e.Code == events.CodeAmbiguous {
			// The executor cannot tell whether its call took effect (a
			// remote call whose answer was lost, say): never failed, never
			// run again.
			return events.TypeAmbiguous, &events.Ambiguous{OpHeader: hdr(item), Attempt: call.Attempt, Code: e.Code, Known: e.Message}, nil
		}
		if errors.As(xerr, &e) {
			return failed(e.Code, e.Message)
		}
		return failed(events.CodeExecutorFailed, xerr.Error())
	}
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	// Results are stored compact, not canonical: no fingerprint covers
	// them, and a result is never refused for how it spells a number.
	var buf bytes.Buffer
	if err := json.Compact(&buf, result); err != nil {
		// The parser's message would quote a piece of the output: say
		// where it broke instead.
		at := ""
		var se *json.SyntaxError
		if errors.As(err, &se) {
			at = fmt.Sprintf(" at byte %d", se.Offset)
		}
		return failed(events.CodeExecutorFailed, fmt.Sprintf("result of %d bytes is not valid JSON%s", len(result), at))
	}
	canon := buf.Bytes()
	if len(canon) > events.MaxResultBytes {
		return failed(events.CodeResultTooLarge, fmt.Sprintf("result is %d bytes, limit %d", len(canon), events.MaxResultBytes))
	}
	return events.TypeCompleted, &events.Completed{
		OpHeader: hdr(item), Attempt: call.Attempt,
		ResultDigest: events.Digest(canon), ResultBytes: len(canon), DurationMS: took.Milliseconds(), Recovered: recovered,
	}, canon
}

// forget lets the op's executor drop its records, now that the op's
// terminal event is stored.
func (r *Runner) forget(ctx context.Context, item work) {
	ex, ok := r.cfg.Registry.Lookup(item.Tool)
	if !ok {
		return
	}
	if f, ok := ex.(Forgetter); ok {
		if err := f.Forget(ctx, item.OpID); err != nil {
			r.cfg.Logger.Debug("forget the op's records", "op", item.OpID, "err", err)
		}
	}
}
