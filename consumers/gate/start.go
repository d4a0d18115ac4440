package gate

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
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

// runHere runs the op whose started event st (with its decision) is
// stored at seq, holding m, its work item's delivery (a request, or a
// grant), in progress until the outcome is stored, then acks it; release
// gives back the op's place.
func (g *Gate) runHere(ctx context.Context, m jetstream.Msg, st *events.Started, seq uint64, args json.RawMessage, replyTo string, release func()) {
	g.inHand.Add(m)
	g.running.Go(func() {
		defer release()
		defer g.inHand.Drop(m)
		if err := g.cfg.Starter.RunStarted(ctx, st, seq, args, replyTo); err != nil {
			// The work item comes back after AckWait, and recovery decides.
			g.cfg.Logger.Warn("op left to recovery", "op", st.OpID, "ws", st.Workspace, "err", err)
			return
		}
		_ = m.Ack()
	})
}

// recoverHere hands m, a delivery to consumer of the work item of op,
// which a gate's process started itself (st, its started event with the
// decision, stored at seq) and which has not ended, to the runner's
// recovery, when this process serves the op's tool in its workspace;
// else it is delivered again later, for a process that does.
func (g *Gate) recoverHere(ctx context.Context, m jetstream.Msg, consumer string, op oplog.Op, st *events.Started, seq uint64, args json.RawMessage, replyTo string) {
	if g.cfg.Starter == nil || g.cfg.Local == nil || !g.cfg.Local(op.Workspace, op.Tool) {
		g.cfg.Logger.Warn("a started op's work item left to a process that serves its tool",
			"op", op.ID, "ws", op.Workspace, "tool", op.Tool, "consumer", consumer)
		_ = m.NakWithDelay(g.cfg.AckWait)
		return
	}
	g.inHand.Add(m)
	g.running.Go(func() {
		defer g.inHand.Drop(m)
		g.cfg.Starter.Recover(ctx, m, consumer, st, seq, args, replyTo)
	})
}

// startedThrough reports whether st is a started event that a gate's
// process appended for an op it started itself, claimed through a
// delivery to consumer: the op's request's, to the gate's consumer (ADR
// 0025), or its granted event's, to the resume consumer (ADR 0029). A
// delivery of the other work item is no recovery of it.
func startedThrough(st *events.Started, consumer string) bool {
	return st.Decision != nil && st.Claim != nil && st.Claim.Consumer == consumer
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
