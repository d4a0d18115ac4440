package gate

// The request path: each request message of a batch becomes its op's
// first event (or a rejection, or the answer about an op that exists),
// and a held op's request moves to AIRLOCK_HELD.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/results"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// admission is one request of a batch on its way to an op.
type admission struct {
	m      jetstream.Msg
	req    *events.Request
	reqSeq uint64
	opID   string
	state  events.State
	append *oplog.Pending
	reply  *events.Reply // nil: the executor answers
	done   bool          // settled (acked or naked)
	// started is the op's first event when this process starts the op
	// (Config.Starter), and release gives back its place.
	started *events.Started
	release func()
	// offered: its args were put in the handoff, for this process's
	// runner.
	offered bool
}

// giveBack gives back the place reserved for the op, if any: this
// delivery does not start it.
func (a *admission) giveBack() {
	if a.release != nil {
		a.release()
		a.release = nil
	}
}

// handleBatch settles a batch of request messages with one round trip in
// all: the ops' first events are appended together, then every request is
// acked.
func (g *Gate) handleBatch(ctx context.Context, msgs []jetstream.Msg) {
	if ctx.Err() != nil {
		// Stopping: nothing of the batch is begun; it goes back at once,
		// for a process that goes on.
		for _, m := range msgs {
			_ = m.Nak()
		}
		return
	}
	wctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	if g.cfg.Archived != nil {
		if err := g.cfg.Archived.CatchUp(wctx); err != nil {
			// Nothing of the batch is stored: it comes back.
			for _, m := range msgs {
				g.retry(m, "catch up with the archive", err)
			}
			return
		}
	}
	adms := make([]*admission, 0, len(msgs))
	for _, m := range msgs {
		if a := g.start(ctx, m); a != nil {
			adms = append(adms, a)
		}
	}
	seqs := make([]uint64, len(adms))
	errs := make([]error, len(adms))
	for i, a := range adms {
		seqs[i], errs[i] = a.append.Wait(wctx, g.ops)
	}
	settled := g.settleArchived(wctx, seqs, errs)
	for i, a := range adms {
		seq, err := seqs[i], errs[i]
		if err == nil && g.cfg.Archived != nil {
			if done := g.archivedRetry(wctx, a, seq, settled); done {
				continue
			}
		}
		copyOf := false // the message is a second copy of an op's request
		held := false   // the op is held, and this message is its request
		placed := false // and this delivery's held event is the one stored
		switch {
		case errors.Is(err, oplog.ErrConflict):
			ex, err := g.existing(wctx, a.req, a.opID)
			if err != nil {
				a.giveBack()
				g.retry(a.m, "existing "+a.opID, err)
				continue
			}
			if a.started != nil && ex.started != nil && ex.started.Attempt == a.started.Attempt && ex.startedSeq == ex.lastSeq {
				// This append was stored after all (a publish tried
				// again after a lost answer meets its own first try),
				// and nothing came after it: the op is this delivery's
				// to run.
				g.runHere(ctx, a.m, a.started, ex.startedSeq, a.req.Args, replyTo(a.m), a.release)
				continue
			}
			a.giveBack()
			if a.offered && ex.reply.State != events.StateReady {
				// The op was not decided now: nothing will take the args
				// offered for it.
				g.cfg.Handoff.Take(a.opID, a.reqSeq)
			}
			a.reply = &ex.reply
			copyOf = ex.reqSeq != 0 && ex.reqSeq != a.reqSeq
			// The op's own request, delivered again while its hold (or
			// the grant's resume) waits: moved now if a crash left it
			// unmoved, before it is acked. Acked, it is below the gate's
			// ack floor and above no live op, and a purge takes it:
			// a resume after that finds the args nowhere.
			held = (ex.reply.State == events.StateHeld || ex.reply.State == events.StateGranted) && ex.reqSeq == a.reqSeq
			if ex.started != nil && ex.reqSeq == a.reqSeq {
				// The op's work item is this very message (ADR 0025),
				// delivered again: its attempt may be lost.
				g.reply(replyTo(a.m), *a.reply)
				g.recoverHere(ctx, a.m, streams.GateConsumer, oplog.Op{Workspace: a.req.Workspace, ID: a.opID, Tool: a.req.Tool}, ex.started, ex.startedSeq, a.req.Args, replyTo(a.m))
				continue
			}
		case err != nil:
			a.giveBack()
			g.retry(a.m, "admit "+a.opID, err)
			continue
		case a.started != nil:
			g.runHere(ctx, a.m, a.started, seq, a.req.Args, replyTo(a.m), a.release)
			continue
		default:
			if r, ok := events.StatusReply(a.append.Data()); ok {
				a.reply = &r
			}
			g.cfg.Logger.Debug("op admitted", "op", a.opID, "ws", a.req.Workspace, "state", a.state, "seq", seq)
			held = a.state == events.StateHeld
			placed = held
		}
		if a.reply != nil {
			g.reply(replyTo(a.m), *a.reply)
		}
		if placed {
			// Kept for the grant, whose resume then reads nothing back.
			// A request delivered again keeps nothing: its held event
			// is not this delivery's, and the grant may be resumed in
			// another process, when nothing here would take it; a
			// resume here reads the copy in AIRLOCK_HELD.
			h, _ := a.append.Data().(*events.Held)
			g.holding.Put(a.opID, a.reqSeq, heldRequest{req: a.req, replyTo: a.m.Headers().Get(events.HeaderReplyTo), held: h, heldSeq: seq})
		}
		if held {
			// A hold lasts; its request leaves AIRLOCK_REQUESTS so that
			// it does not keep its neighbours' deleted requests on disk.
			if err := oplog.MoveToHeld(wctx, g.cfg.JetStream, g.reqs, a.reqSeq, a.opID, a.m.Headers(), a.m.Data()); err != nil {
				g.retry(a.m, "move held request "+a.opID, err)
				continue
			}
		}
		if copyOf {
			// The op reads its args from the message that created it;
			// this copy of them (a retry stored after the dedupe window,
			// a copy published without Nats-Msg-Id) is needed by nobody.
			if err := g.erase(wctx, a.m, a.reqSeq); err != nil {
				continue
			}
		}
		_ = a.m.Ack()
	}
}

// maxEraseDeliveries bounds how often a request message is taken again
// because erasing it failed; after that it is acked and left stored, with
// an error logged.
const maxEraseDeliveries = 10

// erase erases a request message nothing needs: a copy of an existing
// op's request, or a rejected request once its rejection is recorded. On
// failure the message is naked, to be settled again (answering again is
// harmless), and an error is returned, until maxEraseDeliveries.
func (g *Gate) erase(ctx context.Context, m jetstream.Msg, seq uint64) error {
	err := oplog.EraseRequest(ctx, g.reqs, seq)
	if err == nil {
		g.cfg.Logger.Debug("request erased", "seq", seq)
		return nil
	}
	if md, merr := m.Metadata(); merr == nil && md.NumDelivered >= maxEraseDeliveries {
		g.cfg.Logger.Error("request message left stored: erasing it keeps failing", "seq", seq, "deliveries", md.NumDelivered, "err", err)
		return nil
	}
	g.retry(m, "erase request", err)
	return err
}

// start parses one request and starts the append of its op's first event.
// A request that is bad input is rejected and settled here (nil result).
func (g *Gate) start(ctx context.Context, m jetstream.Msg) *admission {
	md, err := m.Metadata()
	if err != nil {
		g.cfg.Logger.Error("request metadata", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return nil
	}
	req, rerr := g.parse(m)
	if rerr != nil {
		if err := g.reject(ctx, m, md.Sequence.Stream, rerr); err != nil {
			g.retry(m, "reject", err)
			return nil
		}
		g.reply(replyTo(m), events.Reply{Code: rerr.Code, Message: rerr.Message})
		// The rejection records the body's size and digest; the body
		// itself, which may hold argument plaintext, goes.
		if err := g.erase(ctx, m, md.Sequence.Stream); err != nil {
			return nil
		}
		_ = m.Ack()
		return nil
	}
	fp, opID := req.Identity()
	a := &admission{m: m, req: req, reqSeq: md.Sequence.Stream, opID: opID}
	typ, data := g.firstEvent(ctx, req, fp, a.opID, a.reqSeq)
	a.state = events.StateAfter(typ)
	if typ == events.TypeDenied {
		a.state = events.StateDenied
	}
	if typ == events.TypeDecided && g.cfg.Local != nil && g.cfg.Local(req.Workspace, req.Tool) {
		if release, ok := g.startHere(req.Tool, a.opID); ok {
			// Allowed, and this process starts it: the first event is
			// its started event, carrying the decision (ADR 0025).
			d := data.(*events.Decided)
			a.started = &events.Started{
				OpHeader: d.OpHeader, Attempt: nuid.Next(), Decision: d,
				Claim: g.cfg.Starter.StartClaim(req.Tool, streams.GateConsumer, a.reqSeq, md.NumDelivered),
			}
			a.release, typ, data, a.state = release, events.TypeStarted, a.started, events.StateExecuting
			failpoint.Hit(failpoint.BeforeStart, req.Tool)
		} else {
			// Before the append: an executor may read the decided event
			// before the gate hears that it is stored.
			g.cfg.Handoff.Put(a.opID, a.reqSeq, req.Args)
			a.offered = true
		}
	}
	op := oplog.Op{Workspace: req.Workspace, ID: a.opID, Tool: req.Tool}
	a.append = g.w.Start(op, 0, typ, Source, data, oplog.ReplyTo(replyTo(m)))
	return a
}

func (g *Gate) retry(m jetstream.Msg, what string, err error) {
	g.cfg.Logger.Warn("gate will retry", "subject", m.Subject(), "what", what, "err", err)
	_ = m.NakWithDelay(g.cfg.RetryDelay)
}

// parse validates a request message. Its error is always an *events.Error.
func (g *Gate) parse(m jetstream.Msg) (*events.Request, *events.Error) {
	fail := func(err error) (*events.Request, *events.Error) {
		var e *events.Error
		if !errors.As(err, &e) {
			e = events.Errorf(events.CodeInvalidEvent, "%v", err)
		}
		return nil, e
	}
	req, err := events.DecodeRequest(m.Headers(), m.Data())
	if err != nil {
		return fail(err)
	}
	ws, agent, _ := events.RequestSubjectParts(m.Subject())
	if ws != req.Workspace || agent != req.Agent {
		return fail(events.Errorf(events.CodeSubjectMismatch, "published on %s but names workspace %q and agent %q: publish on %s", m.Subject(), req.Workspace, req.Agent, events.RequestSubject(req.Workspace, req.Agent)))
	}
	return req, nil
}

// subjectWorkspace is the workspace a request subject names, or
// events.NoWorkspace when it names no valid workspace and agent.
func subjectWorkspace(subject string) string {
	ws, _, ok := events.RequestSubjectParts(subject)
	if !ok {
		return events.NoWorkspace
	}
	return ws
}

// decide rules on a request under the policy and the control override in
// force: a tool no executor group serves in the request's workspace is
// denied NO_EXECUTOR rather than left to wait for ever.
func (g *Gate) decide(ctx context.Context, req *events.Request, override policy.Mode) policy.Decision {
	d := g.Policy().Decide(req, override)
	if d.Outcome != policy.Deny && g.cfg.Served != nil && !g.cfg.Served(ctx, req.Workspace, req.Tool) {
		d.Outcome, d.Code = policy.Deny, events.CodeNoExecutor
		d.Reason = fmt.Sprintf("no executor serves tool %s in workspace %s: start `airlock serve` with an executor of %s whose --workspaces include %s (or none, for every workspace)",
			req.Tool, req.Workspace, req.Tool, req.Workspace)
	}
	return d
}

// firstEvent is the op's first event for a valid request: decided when
// policy allows it, held when it waits for an approver, denied otherwise.
// Each carries the request summary.
func (g *Gate) firstEvent(ctx context.Context, req *events.Request, fingerprint, opID string, reqSeq uint64) (events.Type, any) {
	now := g.cfg.Clock()
	d := g.decide(ctx, req, g.modes.override(req.Workspace, now))
	var operands map[string]string
	if d.Outcome != policy.Deny && g.cfg.Operands != nil {
		var err error
		var byPath map[string]string
		if byPath, err = g.cfg.Operands(ctx, req); err != nil {
			e := &events.Error{Code: events.CodeInvalidArgs, Message: err.Error()}
			errors.As(err, &e)
			d.Outcome, d.Code, d.Reason = policy.Deny, e.Code, e.Message
		}
		operands = events.OperandKeys(byPath)
	}
	sum := &events.Summary{
		Fingerprint:    fingerprint,
		Agent:          req.Agent,
		Tool:           req.Tool,
		Class:          string(d.Class),
		ArgsDigest:     events.ArgsDigest(req.Args),
		IdempotencyKey: req.IdempotencyKey,
		RequestSeq:     reqSeq,
		Operands:       operands,
	}
	hdr := events.OpHeader{OpID: opID, Workspace: req.Workspace}
	switch d.Outcome {
	case policy.Allow:
		return events.TypeDecided, &events.Decided{OpHeader: hdr, Request: sum, PolicyHash: d.Hash, Reason: d.Reason, Rule: d.Rule, Mode: string(d.Mode), Results: g.retention(req.Workspace)}
	case policy.Hold:
		return events.TypeHeld, &events.Held{
			OpHeader: hdr, Request: sum, HoldID: events.HoldID(opID), ArgsDigest: sum.ArgsDigest,
			ExpiresAt:  now.Add(g.Policy().HoldTTL()).UTC().Truncate(time.Millisecond),
			PolicyHash: d.Hash, Reason: d.Reason, Rule: d.Rule, Mode: string(d.Mode),
		}
	}
	return events.TypeDenied, &events.Denied{OpHeader: hdr, Request: sum, Code: d.Code, Reason: d.Reason, PolicyHash: d.Hash, Rule: d.Rule, Mode: string(d.Mode)}
}

// found is what existing found of an op.
type found struct {
	reply events.Reply
	// reqSeq is the sequence of the op's own request message, from the
	// request summary its first event carries (0 when it carries none).
	reqSeq uint64
	// started is the op's started event with its decision when its
	// request message is its work item (ADR 0025) and the op has not
	// ended. startedSeq is where it is stored.
	started    *events.Started
	startedSeq uint64
	// lastSeq is where the op's newest event is stored.
	lastSeq uint64
}

// existing answers a request whose op already exists: a retry, within the
// dedupe window or long after it, or a delivery again of the message that
// created the op. The op's newest event says where it stands. Nothing is
// appended: the op's own events carry it on. The request sequence it
// returns lets the caller tell a copy of the request from a redelivery of
// the message that created the op.
func (g *Gate) existing(ctx context.Context, req *events.Request, opID string) (found, error) {
	last, err := oplog.Last(ctx, g.ops, req.Workspace, opID)
	if err != nil {
		return found{}, err
	}
	if f, ok, err := g.archivedExisting(ctx, opID, last); ok || err != nil {
		return f, err
	}
	_, ended := events.OutcomeReply(last.Data)
	f := found{lastSeq: last.Seq}
	sum := summaryOf(last.Data)
	if st, ok := last.Data.(*events.Started); ok && startedThrough(st, streams.GateConsumer) {
		f.started, f.startedSeq = st, last.Seq
	}
	if sum == nil {
		first, err := oplog.First(ctx, g.ops, req.Workspace, opID)
		if err != nil {
			return found{}, err
		}
		if sum = summaryOf(first.Data); sum == nil {
			// Not an op the gate made: keep the message rather than guess.
			g.cfg.Logger.Warn("op's first event carries no request summary; the request is kept", "op", opID, "event_type", first.Type)
			sum = &events.Summary{}
		}
		if st, ok := first.Data.(*events.Started); ok && startedThrough(st, streams.GateConsumer) && !ended {
			f.started, f.startedSeq = st, first.Seq
		}
	}
	f.reqSeq = sum.RequestSeq
	if r, ok := events.StatusReply(last.Data); ok {
		r.Existing = true
		if c, ok := last.Data.(*events.Completed); ok {
			if err := g.attachResult(ctx, &r, c); err != nil {
				return found{}, err
			}
		}
		f.reply = r
		return f, nil
	}
	f.reply = events.Reply{OpID: opID, Existing: true, State: events.StateAfter(last.Type)}
	return f, nil
}

// retention is what the decided event says to keep of the op's result:
// the policy's, else the gate's default.
func (g *Gate) retention(ws string) *events.Retention {
	def := events.Retention{TTLSeconds: int64(events.DefaultResultTTL / time.Second)}
	if g.cfg.Retention != nil {
		def = *g.cfg.Retention
	}
	r, ok := g.Policy().Results(ws)
	switch {
	case !ok:
		r = def
	case r.TTLSeconds == policy.DefaultTTL:
		r.TTLSeconds = def.TTLSeconds
		r.EraseOnDelivery = r.EraseOnDelivery && r.TTLSeconds > 0
	}
	return &r
}

// attachResult puts a completed op's kept result into the answer to a
// retry: sealed to the agent, or opened when Airlock holds the key it is
// sealed to (--no-auth). The retry came on the agent's own request
// subject with the op's fingerprint, so it is the agent that asked.
func (g *Gate) attachResult(ctx context.Context, r *events.Reply, c *events.Completed) error {
	if g.cfg.Results == nil || c.KeptUntil == nil {
		return nil
	}
	if !g.cfg.Clock().Before(*c.KeptUntil) {
		r.Erased, r.KeptUntil = events.ErasedExpired, nil
		return nil
	}
	sealed, err := g.cfg.Results.Get(ctx, c.Workspace, c.OpID, c.Attempt, c.ResultSeq)
	if errors.Is(err, results.ErrGone) {
		// Erased, and the event that says why is not folded yet.
		r.Erased, r.KeptUntil = events.ErasedExpired, nil
		return nil
	}
	if err != nil {
		return err
	}
	plain, ok, err := g.cfg.Results.Open(c.OpID, sealed)
	switch {
	case err != nil:
		// Never answer with bytes that do not check out; the client
		// reads the result itself and says RESULT_MISMATCH.
		g.cfg.Logger.Error("kept result does not open", "op", c.OpID, "err", err)
	case ok:
		r.Result = plain
	default:
		r.Sealed = sealed
	}
	return nil
}

// summaryOf is the request summary an op event carries, or nil.
func summaryOf(data any) *events.Summary {
	switch d := data.(type) {
	case *events.Decided:
		return d.Request
	case *events.Held:
		return d.Request
	case *events.Denied:
		return d.Request
	case *events.Started:
		if d.Decision != nil {
			return d.Decision.Request
		}
	}
	return nil
}

// reject records a request.rejected event for a bad request.
func (g *Gate) reject(ctx context.Context, m jetstream.Msg, seq uint64, e *events.Error) error {
	ws := subjectWorkspace(m.Subject())
	rej := &events.Rejected{
		Code: e.Code, Message: e.Message, Subject: m.Subject(), RequestSeq: seq,
		RequestID: m.Headers().Get(events.HeaderPrefix + "id"),
		Size:      len(m.Data()), Digest: events.Digest(m.Data()),
	}
	ev, err := events.NewEvent(events.TypeRejected, Source, "", rej)
	if err != nil {
		return err
	}
	msg := events.Encode(events.RejectedSubject(ws), ev)
	// One rejection per request message, even when the request is redelivered.
	_, err = g.cfg.JetStream.PublishMsg(ctx, msg, jetstream.WithMsgID(fmt.Sprintf("rejected:%d", seq)))
	if err == nil {
		g.cfg.Logger.Info("request rejected", "ws", ws, "seq", seq, "code", e.Code, "err", e.Message)
	}
	return err
}

// reply answers an Airlock-Reply-To inbox, if there is one.
func (g *Gate) reply(inbox string, r events.Reply) {
	if inbox == "" {
		return
	}
	body, _ := events.MarshalJSON(r)
	if err := g.cfg.Conn.Publish(inbox, body); err != nil {
		g.cfg.Logger.Debug("reply", "subject", inbox, "err", err)
	}
}

// replyTo is the request's Airlock-Reply-To subject, or "" when it has no
// valid one: only airlock.v1.reply.<agent>.<...> of the agent its subject
// names is answered.
func replyTo(m jetstream.Msg) string {
	// The agent token counts even when the workspace token is bad, so that
	// a request rejected for its subject is still answered.
	_, agent, ok := events.SplitRequestSubject(m.Subject())
	if !ok {
		return ""
	}
	if inbox := m.Headers().Get(events.HeaderReplyTo); events.ValidReplyTo(inbox, agent) {
		return inbox
	}
	return ""
}
