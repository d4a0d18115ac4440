package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/handoff"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/periodic"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/pull"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// ResumeMaxAckPending bounds the grants delivered and not yet acked,
// across every process of the deployment: a granted op that its gate's
// process starts itself keeps its grant's delivery until it has ended
// (ADR 0029), and each process starts at most executor.Config.Direct ops
// itself at once; beyond this bound grants wait to be delivered.
const ResumeMaxAckPending = 4096

// ResumeRequestTries is how many deliveries of a grant read the request
// of an op started through it (ADR 0029) before an unavailable request
// is taken for gone, as executor.Config.RequestTries does for a decided
// event.
const ResumeRequestTries = 5

// runResume consumes granted events: each granted op is decided afresh
// against the policy and controls in force now. The granted event is the
// work item, so a grant whose resume was interrupted is resumed after a
// restart.
func (g *Gate) runResume(ctx context.Context) error {
	cons, err := g.consumer(ctx, streams.Ops, jetstream.ConsumerConfig{
		Durable:       streams.ResumeConsumer,
		Description:   "Airlock gate: granted holds to decisions",
		FilterSubject: events.GrantedSubjects,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       g.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: ResumeMaxAckPending,
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gate: resume consumer: %w", err)
	}
	go streams.KeepAckWait(ctx, g.cfg.JetStream, streams.Ops, streams.ResumeConsumer, g.cfg.AckWait, g.cfg.AckWait/3, g.cfg.Logger)
	return pull.Batches(ctx, cons, pull.Config{Loops: 1, Max: 32, Heartbeat: g.cfg.AckWait / 3}, func(ctx context.Context, msgs []jetstream.Msg) {
		// Each grant is another op's, settled by compare-and-swap on it:
		// they are resumed at once, not one after another, so that a
		// person who grants does not wait behind every grant before.
		var wg sync.WaitGroup
		for _, m := range msgs {
			wg.Go(func() {
				if ctx.Err() != nil {
					// Stopping: nothing starts now; another process
					// takes the grant.
					_ = m.Nak()
					return
				}
				err := g.resume(ctx, m)
				switch {
				case errors.Is(err, errInHand):
					// The work item of an op this process runs: acked
					// once the op has ended.
				case err != nil:
					g.retry(m, "resume", err)
				default:
					_ = m.Ack()
				}
			})
		}
		wg.Wait()
	})
}

// MaxGrantsKept bounds the grants a gate keeps, from its appending them
// to their delivery, of ops that the gate taking the delivery starts
// itself (ADR 0029); the oldest is forgotten to make room, and its
// delivery reads what it needs from the stream.
const MaxGrantsKept = 1024

// maxGrantsKeptBytes bounds the same grants by the size of their
// requests' summaries.
const maxGrantsKeptBytes = 4 << 20

func newGrantsKept() *handoff.Store[*grant] {
	return handoff.NewStore(MaxGrantsKept, maxGrantsKeptBytes, func(gr *grant) int {
		n := 256
		if gr.held != nil && gr.held.Request != nil {
			n += len(gr.held.Request.Operands) * 64
		}
		return n
	})
}

// resume decides one granted op: decided (it runs) unless the policy or a
// control in force now denies it, in which case it ends denied with
// RESUME_DENIED and never runs. A grant answers a hold, so a rule that
// would hold it again does not.
//
// When this process serves the op's tool, the op is started here instead,
// and m, its work item, is kept until the op has ended (errInHand; ADR
// 0029).
func (g *Gate) resume(ctx context.Context, m jetstream.Msg) error {
	md, err := m.Metadata()
	if err != nil {
		return err
	}
	ws, opID, tool, _, okSubj := events.OpSubjectParts(m.Subject())
	run := ctx // an op started here runs past this delivery's time-out
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	if okSubj && g.resumed.take(ctx, opID, md.Sequence.Stream) {
		// Resumed by this gate when it appended this very event: nothing
		// to decode or check.
		return nil
	}
	if kept, ok := g.grants.Take(opID, md.Sequence.Stream); ok && okSubj {
		// Appended by this gate, which read all that follows already.
		return g.resumeGranted(ctx, kept.op, md.Sequence.Stream, kept.granted, kept.held, m, run)
	}
	_, _, data, err := events.DecodeStored(m.Headers(), m.Data())
	if err != nil {
		g.cfg.Logger.Warn("granted event does not decode; skipped", "subject", m.Subject(), "seq", md.Sequence.Stream, "err", err)
		return nil
	}
	gr, ok := data.(*events.Granted)
	if !ok || !okSubj || gr.OpID != opID || gr.Workspace != ws {
		g.cfg.Logger.Warn("granted event on another op's subject; skipped", "subject", m.Subject(), "seq", md.Sequence.Stream)
		return nil
	}
	op := oplog.Op{Workspace: ws, ID: opID, Tool: tool}
	heldEv, err := oplog.LastOf(ctx, g.ops, op, events.TypeHeld)
	if err != nil {
		return err
	}
	held, ok := heldEv.Data.(*events.Held)
	if !ok || held.Request == nil {
		g.cfg.Logger.Warn("granted op has no held summary; skipped", "op", opID, "ws", ws)
		return nil
	}
	return g.resumeGranted(ctx, op, md.Sequence.Stream, gr, held, m, run)
}

// resumeGranted appends what follows the granted event at grantedSeq,
// with compare-and-swap on it: of the gate that appended the grant and
// the resume consumer's delivery (or two deliveries), one appends and the
// others find the op moved on.
func (g *Gate) resumeGranted(ctx context.Context, op oplog.Op, grantedSeq uint64, gr *events.Granted, held *events.Held, m jetstream.Msg, run context.Context) error {
	if held.Request == nil {
		return errors.New("resume: the held event has no request summary")
	}
	next := g.resumeEvent(ctx, op, gr, held)
	if next.data == nil {
		return errors.New("resume: request or controls unreadable")
	}
	if next.typ == events.TypeDecided && m != nil && g.resumeHere(op) && g.operandsUnchanged(ctx, op, next, held) {
		// The op is started here, by no runner: tell a retry of an
		// archived op first, as a runner does with a decided event.
		if done, err := g.archivedGrant(ctx, op, grantedSeq, next.inbox); done || err != nil {
			return err
		}
		if release, ok := g.startHere(op.Tool, op.ID); ok {
			st, seq, err := g.startResumed(ctx, m, op, grantedSeq, next)
			if err != nil {
				release()
				if oplog.IsConflict(err) {
					return g.resumeConflict(ctx, m, op, grantedSeq, next, err, run)
				}
				return err
			}
			g.cfg.Logger.Info("hold resumed", "op", op.ID, "ws", op.Workspace, "hold", gr.HoldID, "event_type", events.TypeStarted, "seq", seq)
			g.runHere(run, m, st, seq, next.req.Args, next.inbox, release)
			return errInHand
		}
	}
	if next.typ == events.TypeDecided && g.cfg.Local != nil && g.cfg.Local(op.Workspace, op.Tool) {
		// As for a first decision: the runner of this process takes the
		// args from here, not from the stream, and the handoff is put
		// before the append its runner may read first.
		g.cfg.Handoff.Put(op.ID, held.Request.RequestSeq, next.req.Args)
	}
	// The decided event carries the request's own reply subject, so the
	// executor answers a submitter that waits on it (a retry after the
	// grant, from the same client).
	inbox := next.inbox
	if next.typ != events.TypeDecided {
		inbox = ""
	}
	seq, err := g.w.Append(ctx, g.ops, op, grantedSeq, next.typ, Source, next.data, oplog.ReplyTo(inbox))
	if oplog.IsConflict(err) {
		return g.resumeConflict(ctx, m, op, grantedSeq, next, err, run)
	}
	if err != nil {
		return err
	}
	g.cfg.Logger.Info("hold resumed", "op", op.ID, "ws", op.Workspace, "hold", gr.HoldID, "event_type", next.typ, "seq", seq)
	return nil
}

// archivedGrant ends the op of the grant at grantedSeq with its archived
// outcome when the op is a retry of one that ended and left the ops
// stream (ADR 0026): the retry's held event was stored as a first event,
// and its gate could not end it before a grant came (it stopped, or could
// not read the archive). It reports whether it did, answering inbox; an
// error leaves the grant to its next delivery.
func (g *Gate) archivedGrant(ctx context.Context, op oplog.Op, grantedSeq uint64, inbox string) (bool, error) {
	a := g.cfg.Archived
	if a == nil {
		return false, nil
	}
	if err := a.Settle(ctx, time.Now(), grantedSeq); err != nil {
		return false, fmt.Errorf("resume: tell a retry of an archived op: %w", err)
	}
	arch, err := a.Duplicate(op.ID, grantedSeq)
	if err != nil || arch == nil {
		return false, err
	}
	r, err := g.restate(ctx, arch, grantedSeq)
	if err != nil {
		return false, fmt.Errorf("resume: restate archived op %s: %w", op.ID, err)
	}
	g.cfg.Logger.Info("grant of a retry of an archived op answered with its outcome; nothing run", "op", op.ID, "ws", op.Workspace, "state", r.State, "granted_seq", grantedSeq)
	g.reply(inbox, r)
	return true, nil
}

// operandsUnchanged reports whether the operands of the granted op's
// call still hash as when it was held: a hold lasts, and what was
// approved is what runs. When they do not (or cannot be read), the op is
// decided instead, and the runner refuses it OPERANDS_CHANGED.
func (g *Gate) operandsUnchanged(ctx context.Context, op oplog.Op, next resumeNext, held *events.Held) bool {
	err := g.cfg.Starter.OperandsUnchanged(ctx, op.Tool, op.Workspace, next.req.Args, held.Request.Operands)
	if err != nil {
		g.cfg.Logger.Info("granted op decided, not started here: its operands", "op", op.ID, "ws", op.Workspace, "err", err)
		return false
	}
	return true
}

// startResumed appends, against the granted event at grantedSeq, the
// started event of an op that this process starts itself, claimed
// through m, the grant's delivery (ADR 0029): the decision next carries,
// and a first claim. It returns the event and where it is stored; an
// append reported lost that landed after all and is the op's newest
// event counts as stored (ownStart).
func (g *Gate) startResumed(ctx context.Context, m jetstream.Msg, op oplog.Op, grantedSeq uint64, next resumeNext) (*events.Started, uint64, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, 0, err
	}
	d := next.data.(*events.Decided)
	st := &events.Started{
		OpHeader: d.OpHeader, Attempt: nuid.Next(), Decision: d,
		Claim: g.cfg.Starter.StartClaim(op.Tool, streams.ResumeConsumer, grantedSeq, md.NumDelivered),
	}
	failpoint.Hit(failpoint.BeforeStart, op.Tool)
	seq, err := g.w.Append(ctx, g.ops, op, grantedSeq, events.TypeStarted, Source, st, oplog.ReplyTo(next.inbox))
	if oplog.IsConflict(err) {
		// Lost, or this very append landed and its answer was lost: when
		// the op's newest event is it, it is this delivery's to run.
		seq, err = g.ownStart(ctx, op, st, err)
	}
	return st, seq, err
}

// ownStart settles a started append of this gate's that was reported to
// have lost its compare-and-swap (conflict): when the op's newest event,
// read on the leader, is this very one (mine, by its attempt; its answer
// was lost, and a read-back lagged), it was stored against the grant and
// nothing came after it, and its sequence is returned for the caller to
// run the op; otherwise conflict.
func (g *Gate) ownStart(ctx context.Context, op oplog.Op, mine *events.Started, conflict error) (uint64, error) {
	raw, err := oplog.LeaderLastMsg(ctx, g.cfg.JetStream, streams.Ops, events.OpFilter(op.Workspace, op.ID))
	if err != nil {
		return 0, conflict
	}
	ev, err := oplog.Decode(raw)
	if err != nil {
		return 0, conflict
	}
	if st, ok := ev.Data.(*events.Started); !ok || st.Attempt != mine.Attempt {
		return 0, conflict
	}
	return ev.Seq, nil
}

// errPushLost is the push resume's answer when its append lost to another
// (a delivery of the grant, in this process or another): the resume is
// not this push's, and that delivery, or one of it again, settles it.
var errPushLost = errors.New("gate: the grant was resumed by its delivery")

// resumeConflict settles a resume whose append against the granted event
// at grantedSeq lost its compare-and-swap (conflict): the op moved on.
// When this process or another started it itself, through the grant's
// delivery (ADR 0029), and it has not ended, m (a delivery of the grant
// again) goes to the runner's recovery; otherwise the op was resumed
// already, by an earlier delivery or by the gate that appended the grant.
// m is nil when the gate that appended the grant resumes it: that push
// is then no resume of its own (errPushLost), whatever the op did.
func (g *Gate) resumeConflict(ctx context.Context, m jetstream.Msg, op oplog.Op, grantedSeq uint64, next resumeNext, conflict error, run context.Context) error {
	if m == nil {
		return errPushLost
	}
	last, err := oplog.Last(ctx, g.ops, op.Workspace, op.ID)
	if err != nil {
		return err
	}
	if last.Seq <= grantedSeq {
		return conflict
	}
	if _, ended := events.OutcomeReply(last.Data); ended {
		return nil
	}
	st, seq, err := g.startedThroughGrant(ctx, op, grantedSeq)
	if err != nil || st == nil {
		return err // nil, nil: decided, the runners' to settle
	}
	// The request is nil only when it is unavailable: gone, or no
	// longer this op's (a transient failure to read it returns before
	// any append). It is read again on the grant's next deliveries, up
	// to ResumeRequestTries (a leader elected a moment ago may not hold
	// it yet); then the recovery ends the op from the executor's records,
	// or REQUEST_UNAVAILABLE if its lost attempt took no effect, rather
	// than wait for args that no read will find.
	var args json.RawMessage
	if next.req != nil {
		args = next.req.Args
	} else if md, err := m.Metadata(); err != nil || md.NumDelivered < ResumeRequestTries {
		return fmt.Errorf("resume: op %s started through its grant and not ended, and its request is unavailable; read again on the next delivery", op.ID)
	}
	g.recoverHere(run, m, streams.ResumeConsumer, op, st, seq, args, next.inbox)
	return errInHand
}

// startedThroughGrant is the started event with which a gate's process
// started op itself, claimed through the delivery of its granted event
// at grantedSeq (ADR 0029); nil when the op was resumed otherwise (its
// decided event is the work item of the runners' consumer). It is read
// from the ops stream's leader: a replica behind must not have it taken
// for one that is not there.
func (g *Gate) startedThroughGrant(ctx context.Context, op oplog.Op, grantedSeq uint64) (*events.Started, uint64, error) {
	subject := events.OpEventSubject(op.Workspace, op.ID, op.Tool, events.TypeStarted)
	raw, err := oplog.LeaderNextMsg(ctx, g.cfg.JetStream, streams.Ops, grantedSeq+1, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	ev, err := oplog.Decode(raw)
	if err != nil {
		return nil, 0, err
	}
	st, ok := ev.Data.(*events.Started)
	if !ok || !startedThrough(st, streams.ResumeConsumer) || st.Claim.WorkSeq != grantedSeq {
		return nil, 0, nil
	}
	return st, ev.Seq, nil
}

// maxResumed bounds the grants a gate remembers resuming itself until the
// resume consumer delivers them. The delivery may go to another gate, so
// an entry may never be taken: the oldest is forgotten to make room.
const maxResumed = 4096

// resumedSet is the grants this gate resumes at once, by op and granted
// event sequence, forgetting the oldest beyond maxResumed. A delivery of
// a grant that this gate is resuming waits for that resume to end rather
// than race it: the delivery often arrives first, and two resumes of one
// grant both read the request and the controls, and one of them then
// loses its compare-and-swap and reads the op again, while the person who
// granted waits.
type resumedSet struct {
	mu    sync.Mutex
	m     map[string]*resuming
	order []string // ring of the ops added, oldest at next
	next  int
}

// resuming is one resume this gate started at once.
type resuming struct {
	seq  uint64
	done chan struct{} // closed when it ends
	ok   bool          // it appended what follows the grant; set before done
}

// begin records that this gate resumes op's grant at seq now; end must
// follow.
func (r *resumedSet) begin(op string, seq uint64) *resuming {
	e := &resuming{seq: seq, done: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]*resuming)
	}
	if _, ok := r.m[op]; !ok {
		if len(r.order) < maxResumed {
			r.order = append(r.order, op)
		} else {
			delete(r.m, r.order[r.next]) // may be taken already: a no-op
			r.order[r.next] = op
			r.next = (r.next + 1) % maxResumed
		}
	}
	r.m[op] = e
	return e
}

// end records how the resume begun as e ended. A failed one is forgotten:
// its delivery resumes the grant.
func (r *resumedSet) end(op string, e *resuming, ok bool) {
	r.mu.Lock()
	if !ok && r.m[op] == e {
		delete(r.m, op)
	}
	r.mu.Unlock()
	e.ok = ok
	close(e.done)
}

// take reports whether op's grant at seq was resumed here, forgetting it.
// While that resume runs it waits for it, until ctx ends (false: the
// delivery resumes the grant itself, and compare-and-swap settles which
// append lands). Its place in the ring stays until it comes round.
func (r *resumedSet) take(ctx context.Context, op string, seq uint64) bool {
	r.mu.Lock()
	e, found := r.m[op]
	r.mu.Unlock()
	if !found || e.seq != seq {
		return false
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return false
	}
	if !e.ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[op] != e {
		return false // taken by another delivery of it
	}
	delete(r.m, op)
	return true
}

// resumeNext is the event that follows a grant (typ and data; nil data
// when what it depends on could not be read, a transient failure: the
// grant is redelivered), the request it resumes (nil when it is gone)
// and the request's valid reply subject.
type resumeNext struct {
	typ   events.Type
	data  any
	req   *events.Request
	inbox string
}

// resumeEvent is what follows a grant.
func (g *Gate) resumeEvent(ctx context.Context, op oplog.Op, gr *events.Granted, held *events.Held) resumeNext {
	deny := func(code events.Code, reason, hash string, d policy.Decision) resumeNext {
		return resumeNext{typ: events.TypeDenied, data: &events.Denied{
			OpHeader: gr.OpHeader, Code: events.CodeResumeDenied, HoldID: gr.HoldID, PolicyHash: hash,
			Rule: d.Rule, Mode: string(d.Mode), Reason: string(code) + ": " + reason,
		}}
	}
	// The request and the controls in force are read at once: a grant's
	// resume is where a person waits.
	var (
		override policy.Mode
		modeErr  error
		read     sync.WaitGroup
	)
	read.Go(func() { override, modeErr = g.freshOverride(ctx, op.Workspace) })
	req, inbox, err := g.heldRequest(ctx, op, held)
	read.Wait()
	if events.CodeOf(err) == events.CodeRequestUnavailable {
		return deny(events.CodeRequestUnavailable, err.Error(), "", policy.Decision{})
	}
	if err != nil {
		g.cfg.Logger.Warn("resume: request", "op", op.ID, "err", err)
		return resumeNext{}
	}
	if modeErr != nil {
		g.cfg.Logger.Warn("resume: controls", "op", op.ID, "err", modeErr)
		return resumeNext{}
	}
	if !events.ValidReplyTo(inbox, req.Agent) {
		inbox = ""
	}
	d := g.decide(ctx, req, override)
	if d.Outcome == policy.Deny {
		next := deny(d.Code, d.Reason, d.Hash, d)
		next.req, next.inbox = req, inbox
		return next
	}
	return resumeNext{typ: events.TypeDecided, data: &events.Decided{
		OpHeader: gr.OpHeader, Request: held.Request, PolicyHash: d.Hash, Rule: d.Rule, Mode: string(d.Mode),
		Reason: "granted by " + gr.Approver + ": " + gr.Reason, Results: g.retention(gr.Workspace),
	}, req: req, inbox: inbox}
}

// Bounds of the requests a gate keeps of the ops it held. A hold the
// gate forgot (evicted, resolved in another process, held before a
// restart) is resumed from its copy in AIRLOCK_HELD, as every hold was
// before: the kept request only saves that read.
const (
	HoldingMaxEntries = 1024
	HoldingMaxBytes   = 16 << 20
)

// Kept reports the requests of held ops this gate keeps in memory for
// their grants, and their bytes (bounded by HoldingMaxEntries and
// HoldingMaxBytes).
func (g *Gate) Kept() (entries, bytes int) { return g.holding.Len() }

// heldRequest is the request of an op this gate held, as it admitted it,
// and the reply subject it carried.
type heldRequest struct {
	req     *events.Request
	replyTo string
	// held is the held event this gate appended for the op, at heldSeq:
	// a resolution that finds the op still there (its compare-and-swap
	// on heldSeq succeeds) need not read it back (Gate.resolve).
	held    *events.Held
	heldSeq uint64
}

// DefaultHoldSweep is how often a gate forgets the requests it kept of
// holds that have expired (Config.HoldSweep): a hold that the sweeper
// marks expired, or that nobody resolves, is not resolved through this
// gate, and its request (args in the clear, in memory) would otherwise
// stay until newer holds push it out. A grant after the expiry is
// refused, kept or not.
const DefaultHoldSweep = time.Minute

// forgetExpiredHolds runs dropExpiredHolds every HoldSweep until ctx
// ends.
func (g *Gate) forgetExpiredHolds(ctx context.Context) {
	periodic.Every(ctx, g.cfg.HoldSweep, func() {
		if n := g.dropExpiredHolds(g.cfg.Clock()); n > 0 {
			g.cfg.Logger.Debug("requests of expired holds forgotten", "holds", n)
		}
	})
}

// dropExpiredHolds forgets the kept requests of holds expired at now, and
// returns how many.
func (g *Gate) dropExpiredHolds(now time.Time) int {
	return g.holding.DropIf(func(h heldRequest) bool {
		return h.held != nil && !now.Before(h.held.ExpiresAt)
	})
}

func newHolding() *handoff.Store[heldRequest] {
	return handoff.NewStore(HoldingMaxEntries, HoldingMaxBytes, func(h heldRequest) int {
		return len(h.req.Args) + len(h.replyTo) + len(h.req.Workspace) + len(h.req.Agent) + len(h.req.Tool)
	})
}

// heldRequest is the request held op's grant resumes, and its reply
// subject. The gate that held the op kept it (the request it parsed and
// checked, at the sequence the held event names), and a grant that this
// process resolves (as most are: the approver's answer waits on it) takes
// it from there; any other reads the copy in AIRLOCK_HELD. That read is
// where the resume would otherwise wait: a direct get is served in line
// on the reader's connection, and a secure delete in AIRLOCK_HELD (the
// erase of an ended op's copy) holds the stream's lock while it rewrites
// and syncs the block.
func (g *Gate) heldRequest(ctx context.Context, op oplog.Op, held *events.Held) (*events.Request, string, error) {
	if h, ok := g.holding.Take(op.ID, held.Request.RequestSeq); ok {
		return h.req, h.replyTo, nil
	}
	req, hdr, err := oplog.HeldRequestMsg(ctx, g.cfg.JetStream, g.reqs, held.Request.RequestSeq, op.ID)
	if err != nil {
		return nil, "", err
	}
	return req, hdr.Get(events.HeaderReplyTo), nil
}
