package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
)

// answer sends a terminal event's outcome to the request's reply inbox.
func (r *Runner) answer(item work, data any) {
	if !events.ValidReplyTo(item.ReplyTo, item.Agent) {
		return
	}
	reply, ok := events.OutcomeReply(data)
	if !ok {
		return
	}
	body, err := events.MarshalJSON(reply)
	if err == nil {
		err = r.cfg.JetStream.Conn().Publish(item.ReplyTo, body)
	}
	if err != nil {
		r.cfg.Logger.Debug("reply", "op", item.OpID, "subject", item.ReplyTo, "err", err)
	}
}

// execute runs the call under the claim at claimSeq and records the result.
func (r *Runner) execute(ctx context.Context, ex Executor, call Call, item work, claimSeq uint64, recovered bool) error {
	start := time.Now()
	var result json.RawMessage
	xerr := operandsUnchanged(ctx, ex, call, item.Operands)
	if xerr == nil {
		result, xerr = ex.Execute(ctx, call)
	}
	if ctx.Err() != nil && xerr != nil {
		// Shut down mid-call: the claim stands and recovery decides.
		return fmt.Errorf("execute %s: %w", item.OpID, ctx.Err())
	}
	return r.record(ctx, call, item, claimSeq, result, xerr, time.Since(start), recovered)
}

// record appends completed or failed for the attempt. It retries a failed
// append; a conflict means the op was recovered by another runner and this
// attempt's outcome no longer counts.
func (r *Runner) record(ctx context.Context, call Call, item work, claimSeq uint64, result json.RawMessage, xerr error, took time.Duration, recovered bool) error {
	typ, data := outcome(call, item, result, xerr, took, recovered)
	var err error
	for try := range r.cfg.RecordRetries {
		if try > 0 {
			select {
			case <-time.After(time.Duration(try) * 100 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err = r.terminal(ctx, item, claimSeq, typ, data); err == nil {
			return nil
		}
	}
	return fmt.Errorf("record %s of %s: %w", typ.Short(), item.OpID, err)
}

// terminal appends a terminal event expecting the op at expect and answers
// the reply inbox once it is stored. A lost compare-and-swap is not an
// error: another runner settled the op, and this event no longer counts.
func (r *Runner) terminal(ctx context.Context, item work, expect uint64, t events.Type, data any) error {
	_, err := r.append(ctx, item, expect, t, data)
	switch {
	case err == nil:
		r.answer(item, data)
		r.forget(ctx, item)
		return nil
	case errors.Is(err, oplog.ErrConflict):
		return nil
	}
	return err
}

// outcome builds the terminal event for an execution.
func outcome(call Call, item work, result json.RawMessage, xerr error, took time.Duration, recovered bool) (events.Type, any) {
	failed := func(code events.Code, msg string) (events.Type, any) {
		return events.TypeFailed, &events.Failed{OpHeader: hdr(item), Attempt: call.Attempt, Code: code, Message: msg}
	}
	if xerr != nil {
		var e *events.Error
		if errors.As(xerr, &e) && e.Code == events.CodeAmbiguous {
			// The executor cannot tell whether its call took effect (a
			// remote call whose answer was lost, say): never failed, never
			// run again.
			return events.TypeAmbiguous, &events.Ambiguous{OpHeader: hdr(item), Attempt: call.Attempt, Code: e.Code, Known: e.Message}
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
		return failed(events.CodeExecutorFailed, "result is not valid JSON: "+err.Error())
	}
	canon := buf.Bytes()
	if len(canon) > events.MaxResultBytes {
		return failed(events.CodeResultTooLarge, fmt.Sprintf("result is %d bytes, limit %d", len(canon), events.MaxResultBytes))
	}
	return events.TypeCompleted, &events.Completed{
		OpHeader: hdr(item), Attempt: call.Attempt, Result: canon,
		ResultDigest: events.Digest(canon), DurationMS: took.Milliseconds(), Recovered: recovered,
	}
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
