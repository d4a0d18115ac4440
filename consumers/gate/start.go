package gate

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Ops this gate's process starts itself (ADR 0025; Config.Starter).
//
// Their request's delivery is their work item: it is kept in progress
// while the op runs and acked only once its outcome is stored. Until then
// JetStream delivers it again only if this process stops beating it (it
// died, or lost its server for longer than AckWait); whichever gate takes
// it then finds the op started and not ended, and hands the delivery to
// its runner's recovery.

// startHere reserves a place for op, of tool, that this process would
// start itself.
func (g *Gate) startHere(tool, op string) (release func(), ok bool) {
	if g.cfg.Starter == nil {
		return nil, false
	}
	return g.cfg.Starter.Start(tool, op)
}

// runStarted runs the op whose first event a's append stored at seq, and
// acks a's request once its outcome is stored.
func (g *Gate) runStarted(ctx context.Context, a *admission, seq uint64) {
	g.inHand.Add(a.m)
	g.running.Go(func() {
		defer a.release()
		defer g.inHand.Drop(a.m)
		err := g.cfg.Starter.RunStarted(ctx, a.started, seq, a.req.Args, replyTo(a.m))
		if err != nil {
			// The request comes back after AckWait, and recovery decides.
			g.cfg.Logger.Warn("op left to recovery", "op", a.opID, "ws", a.req.Workspace, "err", err)
			return
		}
		_ = a.m.Ack()
	})
}

// recover hands a delivery of a started op's request to the runner's
// recovery, when this process serves the op's tool in its workspace;
// else it is delivered again later, for a process that does.
func (g *Gate) recover(ctx context.Context, a *admission, first *events.Started, firstSeq uint64) {
	if g.cfg.Starter == nil || g.cfg.Local == nil || !g.cfg.Local(a.req.Workspace, a.req.Tool) {
		g.cfg.Logger.Warn("a started op's request left to a process that serves its tool",
			"op", a.opID, "ws", a.req.Workspace, "tool", a.req.Tool)
		_ = a.m.NakWithDelay(g.cfg.AckWait)
		return
	}
	g.inHand.Add(a.m)
	g.running.Go(func() {
		defer g.inHand.Drop(a.m)
		g.cfg.Starter.Recover(ctx, a.m, streams.GateConsumer, first, firstSeq, a.req.Args, replyTo(a.m))
	})
}

// Resumed ops this gate's process starts itself (ADR 0029).
//
// A granted op that this process serves is started by the gate that
// takes its granted event's delivery, with a started event that carries
// the decision, and that delivery is its work item, as a request's is
// for an op started at once: kept in progress while the op runs, acked
// once its outcome is stored. A delivery of it again finds the op started
// and not ended, and goes to the runner's recovery.

// errInHand is resume's answer for a delivery this gate holds on to: it
// is neither acked nor naked when the batch ends.
var errInHand = errors.New("gate: the delivery is the work item of an op in hand")

// resumeHere reports whether this gate would start granted op op itself,
// rather than decide it: this process serves its tool in its workspace.
func (g *Gate) resumeHere(op oplog.Op) bool {
	return g.cfg.Starter != nil && g.cfg.Local != nil && g.cfg.Local(op.Workspace, op.Tool) && g.cfg.Starter.Starts(op.Tool)
}

// runResumed runs the resumed op whose started event is stored at seq,
// and acks m, the granted event's delivery, once its outcome is stored.
func (g *Gate) runResumed(ctx context.Context, m jetstream.Msg, st *events.Started, seq uint64, args json.RawMessage, replyTo string, release func()) {
	g.inHand.Add(m)
	g.running.Go(func() {
		defer release()
		defer g.inHand.Drop(m)
		if err := g.cfg.Starter.RunStarted(ctx, st, seq, args, replyTo); err != nil {
			// The grant comes back after AckWait, and recovery decides.
			g.cfg.Logger.Warn("resumed op left to recovery", "op", st.OpID, "ws", st.Workspace, "err", err)
			return
		}
		_ = m.Ack()
	})
}

// recoverResumed hands m, a delivery again of the granted event of an op
// that a gate's process started itself (st, its started event), to the
// runner's recovery; when this process does not serve the op's tool, m is
// delivered again later, for one that does.
func (g *Gate) recoverResumed(ctx context.Context, m jetstream.Msg, op oplog.Op, st *events.Started, seq uint64, args json.RawMessage, replyTo string) {
	if !g.resumeHere(op) {
		g.cfg.Logger.Warn("a resumed op's grant left to a process that serves its tool", "op", op.ID, "ws", op.Workspace, "tool", op.Tool)
		_ = m.NakWithDelay(g.cfg.AckWait)
		return
	}
	g.inHand.Add(m)
	g.running.Go(func() {
		defer g.inHand.Drop(m)
		g.cfg.Starter.Recover(ctx, m, streams.ResumeConsumer, st, seq, args, replyTo)
	})
}
