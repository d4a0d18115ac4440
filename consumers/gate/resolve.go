package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/failpoint"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/nats-io/nats.go"
)

// maxResolveRounds bounds how often one resolution re-reads the op after
// losing a compare-and-swap. Each loss means the op moved on; the second
// read sees where it went.
const maxResolveRounds = 3

// handleResolve answers an approver's grant or deny of a hold.
func (g *Gate) handleResolve(ctx context.Context, m *nats.Msg) {
	ws, who, perr := g.principal(m.Subject, RoleApprover)
	if perr != nil {
		g.respond(m, events.Reply{Code: perr.Code, Message: perr.Message})
		return
	}
	res, err := events.ParseResolution(m.Data)
	if err != nil {
		e := err.(*events.Error)
		g.respond(m, events.Reply{Code: e.Code, Message: e.Message})
		return
	}
	rctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	r, grant, err := g.resolve(rctx, ws, who, res)
	if err != nil {
		g.cfg.Logger.Warn("resolution not settled", "ws", ws, "hold", res.HoldID, "err", err)
		g.respond(m, events.Reply{Code: events.CodeUnavailable, Message: err.Error()})
		return
	}
	var e *resuming
	switch {
	case grant != nil && g.resumeHere(grant.op):
		// This process serves the op: the gate that takes the grant's
		// delivery starts it (ADR 0029), this one with what it read
		// already. Kept before the answer: the delivery may come first.
		g.grants.Put(grant.op.ID, grant.seq, grant)
		grant = nil
	case grant != nil:
		// Before the answer, and so before the approver can act on it,
		// and as soon after the grant's append as can be: a delivery of
		// the grant that arrives from now on waits for this resume.
		e = g.resumed.begin(grant.op.ID, grant.seq)
	}
	g.respond(m, r)
	if grant != nil {
		// The grant is stored: it is the work item the resume consumer
		// delivers, after a crash too. This gate resumes the op now, by
		// push, rather than after that delivery and the reads it needs; a
		// delivery to this gate waits for it and is then acked, and one
		// to another gate loses its compare-and-swap on the granted event.
		failpoint.Hit(failpoint.BeforePush, grant.op.Tool)
		gctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
		err := g.resumeGranted(gctx, grant.op, grant.seq, grant.granted, grant.held, nil, gctx)
		g.resumed.end(grant.op.ID, e, err == nil)
		if errors.Is(err, errPushLost) {
			g.cfg.Logger.Debug("hold resumed by its grant's delivery first", "op", grant.op.ID)
		} else if err != nil {
			g.cfg.Logger.Info("hold not resumed at once; the resume consumer will", "op", grant.op.ID, "err", err)
		}
	}
}

// grant is a grant this gate appended: what resuming it needs.
type grant struct {
	op      oplog.Op
	seq     uint64 // of the granted event
	granted *events.Granted
	held    *events.Held
}

// resolve applies one resolution to its hold with compare-and-swap on the
// op: of two racing resolutions exactly one is appended, and the other is
// told how the hold was resolved.
//
// A grant it appended is returned too, for the caller to resume.
func (g *Gate) resolve(ctx context.Context, ws string, who Principal, res *events.Resolution) (events.Reply, *grant, error) {
	opID, _ := events.OpOfHold(res.HoldID)
	refuse := func(code events.Code, format string, args ...any) (events.Reply, *grant, error) {
		return events.Reply{OpID: opID, Code: code, Message: fmt.Sprintf(format, args...)}, nil, nil
	}
	if r, gr, ok, err := g.resolveHeldHere(ctx, ws, who, res, opID); ok || err != nil {
		return r, gr, err
	}
	for round := 0; round < maxResolveRounds; round++ {
		last, err := oplog.Last(ctx, g.ops, ws, opID)
		if errors.Is(err, oplog.ErrEmpty) {
			if op := g.archivedOp(opID); op != nil && op.Workspace == ws && op.HoldID == res.HoldID {
				// Ended, and its events went to the archive: answered from
				// the projection as resolved would from the events.
				return archivedResolution(op, who, res), nil, nil
			}
			return refuse(events.CodeHoldNotFound, "no hold %s in workspace %s", res.HoldID, ws)
		}
		if err != nil {
			return events.Reply{}, nil, err
		}
		_, _, tool, _, _ := events.OpSubjectParts(last.Subject)
		op := oplog.Op{Workspace: ws, ID: opID, Tool: tool}
		heldEv := last // a pending hold's newest event is its held event
		if last.Type != events.TypeHeld {
			heldEv, err = oplog.LastOf(ctx, g.ops, op, events.TypeHeld)
		}
		if errors.Is(err, oplog.ErrEmpty) {
			return refuse(events.CodeHoldNotFound, "op %s was never held", opID)
		}
		if err != nil {
			return events.Reply{}, nil, err
		}
		held, ok := heldEv.Data.(*events.Held)
		if !ok || held.HoldID != res.HoldID {
			return refuse(events.CodeHoldNotFound, "op %s has no hold %s", opID, res.HoldID)
		}
		info := &events.HoldInfo{HoldID: held.HoldID, ArgsDigest: held.ArgsDigest, ExpiresAt: held.ExpiresAt, Reason: held.Reason}
		if _, pending := last.Data.(*events.Held); !pending {
			r, err := g.resolved(ctx, op, last, who, res)
			r.Hold = info
			return r, nil, err
		}
		if !g.cfg.Clock().Before(held.ExpiresAt) {
			// Fail closed: the hold is over whether or not the sweeper has
			// marked it yet; mark it now.
			_, err := g.w.Append(ctx, g.ops, op, last.Seq, events.TypeExpired, Source,
				&events.Expired{OpHeader: held.OpHeader, HoldID: held.HoldID})
			if oplog.IsConflict(err) {
				continue
			}
			if err != nil {
				return events.Reply{}, nil, err
			}
			g.forget(held)
			g.cfg.Logger.Info("hold expired", "op", opID, "ws", ws, "hold", held.HoldID)
			r, _, _ := refuse(events.CodeHoldExpired, "hold %s expired at %s", held.HoldID, held.ExpiresAt.Format(timeFormat))
			r.State, r.Hold = events.StateExpired, info
			return r, nil, nil
		}
		if res.ArgsDigest != held.ArgsDigest {
			r, _, _ := refuse(events.CodeGrantDigestMismatch, "hold %s covers args %s, not %s", held.HoldID, held.ArgsDigest, res.ArgsDigest)
			r.State, r.Hold = events.StateHeld, info
			return r, nil, nil
		}
		if err := g.checkApproval(held, who, res); err != nil {
			e := err.(*events.Error)
			r, _, _ := refuse(e.Code, "%s", e.Message)
			r.State, r.Hold = events.StateHeld, info
			g.cfg.Logger.Warn("resolution refused: its approval does not check out", "op", opID, "ws", ws, "hold", held.HoldID, "approver", who.Name, "err", e.Message)
			return r, nil, nil
		}
		typ, data, state := g.resolution(held, who, res)
		seq, err := g.w.Append(ctx, g.ops, op, last.Seq, typ, Source, data)
		if oplog.IsConflict(err) {
			continue // the op moved on: the next round says where
		}
		if err != nil {
			return events.Reply{}, nil, err
		}
		r, gr := g.appended(op, seq, data, state, held, who, res, info)
		return r, gr, nil
	}
	return events.Reply{}, nil, fmt.Errorf("hold %s: still contended after %d rounds", res.HoldID, maxResolveRounds)
}

// resolveHeldHere resolves a hold this gate placed without reading the op
// back: it kept the held event and its sequence (heldRequest), and the
// resolution's compare-and-swap on that sequence is what makes it safe,
// as on a sequence just read. It settles (ok) only the common case, a
// valid resolution of a hold still pending: anything else (an op it did
// not hold, in another workspace, an expired hold, a resolution to
// refuse, an op that moved on, which loses the compare-and-swap) is left
// to resolve's reading rounds, which answer it as before.
func (g *Gate) resolveHeldHere(ctx context.Context, ws string, who Principal, res *events.Resolution, opID string) (events.Reply, *grant, bool, error) {
	_, h, ok := g.holding.Peek(opID)
	if !ok || h.held == nil || h.heldSeq == 0 || h.req == nil || h.req.Workspace != ws ||
		h.held.OpID != opID || h.held.Workspace != ws || h.held.HoldID != res.HoldID {
		return events.Reply{}, nil, false, nil
	}
	held := h.held
	if !g.cfg.Clock().Before(held.ExpiresAt) || res.ArgsDigest != held.ArgsDigest || g.checkApproval(held, who, res) != nil {
		return events.Reply{}, nil, false, nil
	}
	op := oplog.Op{Workspace: ws, ID: opID, Tool: h.req.Tool}
	typ, data, state := g.resolution(held, who, res)
	seq, err := g.w.Append(ctx, g.ops, op, h.heldSeq, typ, Source, data)
	if oplog.IsConflict(err) {
		return events.Reply{}, nil, false, nil // the op moved on: read where it went
	}
	if err != nil {
		return events.Reply{}, nil, false, err
	}
	info := &events.HoldInfo{HoldID: held.HoldID, ArgsDigest: held.ArgsDigest, ExpiresAt: held.ExpiresAt, Reason: held.Reason}
	r, gr := g.appended(op, seq, data, state, held, who, res, info)
	return r, gr, true, nil
}

// appended answers the resolution of held that was appended at seq, and
// returns, for a grant, what its resume needs; a deny forgets the kept
// request.
func (g *Gate) appended(op oplog.Op, seq uint64, data any, state events.State, held *events.Held, who Principal, res *events.Resolution, info *events.HoldInfo) (events.Reply, *grant) {
	g.cfg.Logger.Info("hold resolved", "op", op.ID, "ws", op.Workspace, "hold", held.HoldID, "decision", res.Decision, "approver", who.Name, "seq", seq)
	var gr *grant
	if d, ok := data.(*events.Granted); ok {
		gr = &grant{op: op, seq: seq, granted: d, held: held}
	} else {
		g.forget(held)
	}
	return events.Reply{OpID: op.ID, State: state, Hold: info}, gr
}

// forget drops the request this gate kept of held's op, if any: the hold
// ended without a grant, and nothing resumes it.
func (g *Gate) forget(held *events.Held) {
	if held.Request != nil {
		g.holding.Take(held.OpID, held.Request.RequestSeq)
	}
}

// checkApproval requires of an approver with a key a statement, signed
// with that key, that says exactly what res does to held (ADR 0021). An
// approver without a key (a server that authenticates nobody) signs
// nothing. Nobody resolves a call its own agent made.
func (g *Gate) checkApproval(held *events.Held, who Principal, res *events.Resolution) error {
	// Names are checked only where the server authenticates them.
	if g.cfg.Principals != nil && held.Request != nil && held.Request.Agent == who.Name {
		return events.Errorf(events.CodeNotAuthorized, "%s asked for op %s: the agent that asks for a call never resolves it", who.Name, held.OpID)
	}
	if !who.signs() {
		// Nothing to check it with: it is not recorded either.
		res.Approval = nil
		return nil
	}
	if res.Approval == nil {
		return events.Errorf(events.CodeInvalidSignature, "the resolution carries no signed statement: an approver with a key signs every grant and deny (airlock holds grant does, with the approver's credential; the inbox does, with a passkey)")
	}
	var operands map[string]string
	if held.Request != nil {
		operands = held.Request.Operands
	}
	want := events.ApprovalStatement{
		HoldID: held.HoldID, OpID: held.OpID, Workspace: held.Workspace, ArgsDigest: held.ArgsDigest,
		OperandsDigest: events.OperandsDigest(operands), Decision: res.Decision,
		ReasonDigest: events.ReasonDigest(res.Reason), PolicyHash: held.PolicyHash, Approver: who.Name,
	}
	if err := res.Approval.Matches(want, g.cfg.Clock()); err != nil {
		return err
	}
	sig := res.Approval.Signature
	if sig.Alg != events.AlgWebAuthn {
		if who.Key == "" {
			return events.Errorf(events.CodeInvalidSignature, "%s has no NATS credential to sign with %s: approve with a passkey, in the inbox", who.Name, sig.Alg)
		}
		return res.Approval.Verify(who.Key)
	}
	rp, ok := who.Passkeys[sig.Key]
	if !ok {
		return events.Errorf(events.CodeInvalidSignature, "signed by a passkey %s did not enroll (key %.16s...): enroll it from an enrollment link (airlock approvers add)", who.Name, sig.Key)
	}
	if !slices.Contains(who.PasskeyWorkspaces, held.Workspace) {
		return events.Errorf(events.CodeNotAuthorized, "%s may not resolve holds in workspace %s: airlock approvers add %s --ws %s grants it", who.Name, held.Workspace, who.Name, held.Workspace)
	}
	if err := res.Approval.Verify(sig.Key); err != nil {
		return err
	}
	return events.VerifyWebAuthnRelyingParty(sig.Sig, rp)
}

// resolution is the event that applies res to held.
func (g *Gate) resolution(held *events.Held, who Principal, res *events.Resolution) (events.Type, any, events.State) {
	key := who.Key
	if res.Approval != nil {
		key = res.Approval.Signature.Key // the passkey's, when it signed
	}
	if res.Decision == events.DecisionGrant {
		return events.TypeGranted, &events.Granted{
			OpHeader: held.OpHeader, HoldID: held.HoldID, ArgsDigest: held.ArgsDigest,
			Approver: who.Name, ApproverKey: key, Reason: res.Reason, Approval: res.Approval,
		}, events.StateGranted
	}
	return events.TypeDenied, &events.Denied{
		OpHeader: held.OpHeader, Code: events.CodeApprovalDenied, Reason: res.Reason,
		Actor: who.Name, ActorKey: key, HoldID: held.HoldID, Approval: res.Approval,
	}, events.StateDenied
}

// resolved answers a resolution of a hold that is no longer pending. The
// same approver sending the same resolution again (a retry after a lost
// answer) is told it stands; anyone else gets HOLD_RESOLVED or
// HOLD_EXPIRED.
func (g *Gate) resolved(ctx context.Context, op oplog.Op, last *oplog.Event, who Principal, res *events.Resolution) (events.Reply, error) {
	r := events.Reply{OpID: op.ID, State: events.StateAfter(last.Type)}
	if or, ok := events.OutcomeReply(last.Data); ok {
		r.State = or.State
	}
	if _, ok := last.Data.(*events.Expired); ok {
		return standing(r, true, "", "", who, res), nil
	}
	var by string
	var decision events.Decision
	if gr, err := oplog.LastOf(ctx, g.ops, op, events.TypeGranted); err == nil {
		if d, ok := gr.Data.(*events.Granted); ok {
			by, decision = d.Approver, events.DecisionGrant
		}
	} else if !errors.Is(err, oplog.ErrEmpty) {
		return events.Reply{}, err
	}
	if decision == "" {
		if dn, ok := last.Data.(*events.Denied); ok && dn.Actor != "" {
			by, decision = dn.Actor, events.DecisionDeny
		}
	}
	return standing(r, false, decision, by, who, res), nil
}

// archivedResolution is resolved's answer for a hold whose op ended and
// left the ops stream (ADR 0026), from the op as the projection holds it.
func archivedResolution(op *events.Op, who Principal, res *events.Resolution) events.Reply {
	expired := op.State == events.StateExpired && op.Resolution == ""
	return standing(events.Reply{OpID: op.ID, State: op.State}, expired, events.Decision(op.Resolution), op.Approver, who, res)
}

// standing completes r, the answer to res from who about a hold no
// longer pending: expired unresolved is HOLD_EXPIRED; resolved with
// decision by by, the same approver's same resolution stands (Existing),
// any other is HOLD_RESOLVED (decision "" when not known).
func standing(r events.Reply, expired bool, decision events.Decision, by string, who Principal, res *events.Resolution) events.Reply {
	switch {
	case expired:
		r.Code, r.Message = events.CodeHoldExpired, "hold "+res.HoldID+" expired unresolved"
	case decision == res.Decision && by == who.Name:
		r.Existing = true
	case decision != "":
		r.Code = events.CodeHoldResolved
		r.Message = fmt.Sprintf("hold %s was already resolved: %s by %s (op %s)", res.HoldID, decision, by, r.State)
	default:
		r.Code = events.CodeHoldResolved
		r.Message = fmt.Sprintf("hold %s is already resolved (op %s)", res.HoldID, r.State)
	}
	return r
}

const timeFormat = "2006-01-02T15:04:05Z07:00"
