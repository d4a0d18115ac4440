package gate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/handoff"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/periodic"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/pull"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

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
		MaxAckPending: 256,
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
				if err := g.resume(ctx, m); err != nil {
					g.retry(m, "resume", err)
					return
				}
				_ = m.Ack()
			})
		}
		wg.Wait()
	})
}

// resume decides one granted op: decided (it runs) unless the policy or a
// control in force now denies it, in which case it ends denied with
// RESUME_DENIED and never runs. A grant answers a hold, so a rule that
// would hold it again does not.
func (g *Gate) resume(ctx context.Context, m jetstream.Msg) error {
	md, err := m.Metadata()
	if err != nil {
		return err
	}
	ws, opID, tool, _, okSubj := events.OpSubjectParts(m.Subject())
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	if okSubj && g.resumed.take(ctx, opID, md.Sequence.Stream) {
		// Resumed by this gate when it appended this very event: nothing
		// to decode or check.
		return nil
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
	return g.resumeGranted(ctx, op, md.Sequence.Stream, gr, held)
}

// resumeGranted appends what follows the granted event at grantedSeq,
// with compare-and-swap on it: of the gate that appended the grant and
// the resume consumer's delivery (or two deliveries), one appends and the
// others find the op moved on.
func (g *Gate) resumeGranted(ctx context.Context, op oplog.Op, grantedSeq uint64, gr *events.Granted, held *events.Held) error {
	if held.Request == nil {
		return errors.New("resume: the held event has no request summary")
	}
	typ, next, inbox := g.resumeEvent(ctx, op, gr, held)
	if next == nil {
		return errors.New("resume: request or controls unreadable")
	}
	// The decided event carries the request's own reply subject, so the
	// executor answers a submitter that waits on it (a retry after the
	// grant, from the same client).
	seq, err := g.w.Append(ctx, g.ops, op, grantedSeq, typ, Source, next, oplog.ReplyTo(inbox))
	if oplog.IsConflict(err) {
		last, lerr := oplog.Last(ctx, g.ops, op.Workspace, op.ID)
		if lerr != nil {
			return lerr
		}
		if last.Seq > grantedSeq {
			return nil // resumed already, by an earlier delivery
		}
		return err
	}
	if err != nil {
		return err
	}
	g.cfg.Logger.Info("hold resumed", "op", op.ID, "ws", op.Workspace, "hold", gr.HoldID, "event_type", typ, "seq", seq)
	return nil
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

// resumeEvent is the event that follows a grant, and the request's valid
// reply subject; nil when what it depends on could not be read (a
// transient failure: the grant is redelivered).
func (g *Gate) resumeEvent(ctx context.Context, op oplog.Op, gr *events.Granted, held *events.Held) (events.Type, any, string) {
	deny := func(code events.Code, reason, hash string, d policy.Decision) (events.Type, any, string) {
		return events.TypeDenied, &events.Denied{
			OpHeader: gr.OpHeader, Code: events.CodeResumeDenied, HoldID: gr.HoldID, PolicyHash: hash,
			Rule: d.Rule, Mode: string(d.Mode), Reason: string(code) + ": " + reason,
		}, ""
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
		return "", nil, ""
	}
	if modeErr != nil {
		g.cfg.Logger.Warn("resume: controls", "op", op.ID, "err", modeErr)
		return "", nil, ""
	}
	d := g.decide(ctx, req, override)
	if d.Outcome == policy.Deny {
		return deny(d.Code, d.Reason, d.Hash, d)
	}
	if !events.ValidReplyTo(inbox, req.Agent) {
		inbox = ""
	}
	if g.cfg.Local != nil && g.cfg.Local(op.Workspace, op.Tool) {
		// As for a first decision: the runner of this process takes the
		// args from here, not from the stream, and the handoff is put
		// before the append its runner may read first.
		g.cfg.Handoff.Put(op.ID, held.Request.RequestSeq, req.Args)
	}
	return events.TypeDecided, &events.Decided{
		OpHeader: gr.OpHeader, Request: held.Request, PolicyHash: d.Hash, Rule: d.Rule, Mode: string(d.Mode),
		Reason: "granted by " + gr.Approver + ": " + gr.Reason, Results: g.retention(gr.Workspace),
	}, inbox
}

// Bounds of the requests a gate keeps of the ops it held. A hold the
// gate forgot (evicted, resolved in another process, held before a
// restart) is resumed from its copy in AIRLOCK_HELD, as every hold was
// before: the kept request only saves that read.
const (
	HoldingMaxEntries = 1024
	HoldingMaxBytes   = 16 << 20
)

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
