package gate

import (
	"context"

	"github.com/airlock-dev/airlock/events"
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
func (g *Gate) recover(ctx context.Context, a *admission, first *events.Started) {
	if g.cfg.Starter == nil || g.cfg.Local == nil || !g.cfg.Local(a.req.Workspace, a.req.Tool) {
		g.cfg.Logger.Warn("a started op's request left to a process that serves its tool",
			"op", a.opID, "ws", a.req.Workspace, "tool", a.req.Tool)
		_ = a.m.NakWithDelay(g.cfg.AckWait)
		return
	}
	g.inHand.Add(a.m)
	g.running.Go(func() {
		defer g.inHand.Drop(a.m)
		g.cfg.Starter.Recover(ctx, a.m, first, a.req.Args, replyTo(a.m))
	})
}
