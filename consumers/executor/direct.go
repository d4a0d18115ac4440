package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Ops the gate of this process starts itself (ADR 0025).
//
// When the gate allows an op whose tool this process serves, and whose
// executor prepares no evidence, it appends a started event as the op's
// first event, with the decision and a claim of this runner, instead of a
// decided event; once it is stored, RunStarted calls the executor and
// stores the outcome. The request's delivery to the gate is the op's work
// item: the gate acks it only once RunStarted has stored the outcome, and
// keeps it in progress until then. If this process dies, the request is
// delivered again, to some gate, which finds the op started and not ended
// and passes the delivery to Recover: the lost attempt is settled as one
// taken through a decided event is.

// drainDirect waits until no op the gate of this process started is in
// hand, and keeps every place taken, so that none starts after: Run
// closes the writer those ops store their outcomes with only after it.
func (r *Runner) drainDirect() {
	for range cap(r.direct) {
		r.direct <- struct{}{}
	}
}

// Start reserves a place for op, of tool, that the gate of this process
// would start itself. It fails when the tool has no executor here, when
// its executor prepares evidence (that runs before the started event, in
// the runner), when Config.Direct such ops are running already (the op
// is then decided, and taken by the runner's consumer, as usual), or when
// the op is in hand here already. The reservation holds the op in hand
// from before its started event is appended until release: a delivery of
// its request again in the meantime finds it here and leaves it alone.
// Call release once the op is no longer in hand, whether it started or
// not.
func (r *Runner) Start(tool, op string) (release func(), ok bool) {
	if !r.Starts(tool) {
		return nil, false
	}
	select {
	case r.direct <- struct{}{}:
	default:
		return nil, false
	}
	if !r.inflight.reserve(op) {
		<-r.direct
		return nil, false
	}
	return func() {
		r.inflight.unreserve(op)
		<-r.direct
	}, true
}

// Starts reports whether the gate of this process may start ops of tool
// itself (Start may still refuse one: places taken, the op in hand).
func (r *Runner) Starts(tool string) bool {
	ex, found := r.cfg.Registry.Lookup(tool)
	if !found {
		return false
	}
	_, prepares := ex.(Preparer)
	return !prepares
}

// OperandsUnchanged takes the hashes of the operands of a call of tool in
// ws with args again, as the runner does before it claims a decided op,
// and refuses (OPERANDS_CHANGED) when any differs from want, the
// decision's record. A granted op's gate checks so before it starts the
// op itself (ADR 0029): a hold lasts, and what was approved is what runs.
// Any error means: decide the op instead, for the runner to refuse or
// run.
func (r *Runner) OperandsUnchanged(ctx context.Context, tool, ws string, args json.RawMessage, want map[string]string) error {
	ex, ok := r.cfg.Registry.Lookup(tool)
	if !ok {
		return fmt.Errorf("executor: no executor of tool %s here", tool)
	}
	return operandsUnchanged(ctx, ex, Call{Workspace: ws, Args: args}, want)
}

// StartClaim is the claim of the first attempt of an op that the gate of
// this process starts: made through delivery n of the message stored at
// workSeq to consumer, the op's work item (the request, to the gate's
// consumer; or the granted event, to the resume consumer, ADR 0029).
func (r *Runner) StartClaim(tool, consumer string, workSeq, n uint64) *events.Claim {
	return &events.Claim{
		Executor: tool, WorkSeq: workSeq, Delivery: n, Consumer: consumer,
		Runner: r.id, Instance: r.cfg.Instance, Host: r.cfg.Host,
	}
}

// RunStarted runs the attempt of first, the op's first event (a started
// event with a decision, stored at seq), with the request's args, and
// stores its outcome; the outcome goes to replyTo too. The caller holds
// the op's reservation (Start) until it returns. nil means the
// outcome is stored and the request can be acked; an error leaves the
// request to be delivered again and the attempt to recovery.
func (r *Runner) RunStarted(ctx context.Context, first *events.Started, seq uint64, args json.RawMessage, replyTo string) error {
	item, ex, err := r.startedWork(first, seq, replyTo)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// Shutting down before the call: the claim stands and recovery
		// decides, as for any attempt lost after its started event.
		return fmt.Errorf("executor: %s not run: %w", item.OpID, err)
	}
	call := callOf(item)
	call.Args, call.Attempt = args, first.Attempt
	return r.execute(ctx, ex, call, item, seq, time.Now(), false)
}

// Recover settles m, a delivery to consumer of the work item of an op
// that some gate's process started itself (its request, ADR 0025; its
// granted event, ADR 0029), first being that started event, with its
// decision, stored at firstSeq, and which has not ended when the gate
// read it: m is acked,
// naked or left, as a decided event's delivery would be. An attempt lost
// with its process is recovered (judged by its executor; run again,
// ended from the executor's records, or ended ambiguous); one in hand
// here, or held by a newer delivery, is left alone.
func (r *Runner) Recover(ctx context.Context, m jetstream.Msg, consumer string, first *events.Started, firstSeq uint64, args json.RawMessage, replyTo string) {
	md, err := m.Metadata()
	if err != nil {
		r.cfg.Logger.Error("request metadata", "subject", m.Subject(), "err", err)
		return
	}
	item, ex, err := r.startedWork(first, firstSeq, replyTo)
	if err != nil {
		// No executor of the tool here: a process that has one settles it.
		r.cfg.Logger.Warn("op started by another process left to a process that serves its tool", "op", first.OpID, "err", err)
		_ = m.NakWithDelay(r.cfg.OwnerRetryDelay)
		return
	}
	if !r.inflight.take(item.OpID) {
		return // the delivery in hand here settles it
	}
	defer r.inflight.release(item.OpID)
	// A recovery may run the call again: it takes one of the places of
	// the ops the gate starts, or waits for one.
	select {
	case r.direct <- struct{}{}:
		defer func() { <-r.direct }()
	default:
		_ = m.NakWithDelay(r.cfg.OwnerRetryDelay)
		return
	}
	j := &job{
		m:    m,
		d:    delivery{item: item, workSeq: md.Sequence.Stream, n: md.NumDelivered, consumer: consumer},
		log:  r.cfg.Logger.With("op", item.OpID, "ws", item.Workspace),
		call: callOf(item),
	}
	j.call.Args = args
	j.err = r.recoverStarted(ctx, ex, j)
	r.settle(j)
}

// recoverStarted settles the job of a work item's delivery from the op's
// newest event: ended (answered and acked), claimed through another work
// item (acked), held by a newer delivery (left), or lost (recovered). A
// read that does not reach the started event (a replica behind the
// leader) is looked at again later: the op's earlier events (a hold's)
// say nothing of the attempt.
func (r *Runner) recoverStarted(ctx context.Context, ex Executor, j *job) error {
	last, err := oplog.Last(ctx, r.ops, j.d.item.Workspace, j.d.item.OpID)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotClaimed, err)
	}
	if last.Seq < j.d.item.ReadySeq {
		return fmt.Errorf("%w: read of %s is behind its started event", errNotClaimed, j.d.item.OpID)
	}
	lost, err := r.attemptOf(ctx, j.d.item, last)
	if err != nil {
		return err
	}
	if lost == nil {
		r.ended(ctx, j.d.item, last.Data)
		return nil
	}
	c := lost.claim
	switch {
	case c.WorkSeq != j.d.workSeq || c.Consumer != j.d.consumer:
		return nil // claimed through another work item
	case c.Runner == r.id && c.Delivery >= j.d.n:
		return errLeave
	}
	j.call.Attempt = nuid.Next()
	return r.recover(ctx, ex, j, lost, last.Seq)
}

// startedWork is the work item of an op whose first event is first,
// stored at seq, and its tool's executor.
func (r *Runner) startedWork(first *events.Started, seq uint64, replyTo string) (work, Executor, error) {
	d := first.Decision
	if d == nil || d.Request == nil {
		return work{}, nil, fmt.Errorf("executor: the started event of %s carries no decision", first.OpID)
	}
	ex, ok := r.cfg.Registry.Lookup(d.Request.Tool)
	if !ok {
		return work{}, nil, fmt.Errorf("executor: no executor of tool %s here", d.Request.Tool)
	}
	return work{
		OpID: first.OpID, Workspace: first.Workspace, Agent: d.Request.Agent, Tool: d.Request.Tool,
		RequestSeq: d.Request.RequestSeq, ReadySeq: seq, ReplyTo: replyTo,
		Operands: d.Request.Operands, Results: d.Results,
	}, ex, nil
}
