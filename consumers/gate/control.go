package gate

import (
	"context"
	"fmt"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Roles the gate checks a command's principal against.
const (
	RoleApprover = "approver"
	RoleOperator = "operator"
)

// Principal is who published a command, as Config.Principals knows it.
type Principal struct {
	Name string
	Role string
	// Key is the public key of the principal's credential; empty for an
	// approver of the inbox alone, who has no NATS credential.
	Key string
	// Passkeys are the public keys (events.AlgWebAuthn's form) of the
	// passkeys an approver enrolled in the inbox, each with the relying
	// party it was enrolled at.
	Passkeys map[string]events.RelyingParty
	// PasskeyWorkspaces are the only workspaces in which an approval
	// signed with one of Passkeys is accepted.
	PasskeyWorkspaces []string
}

// signs reports whether the principal has a key to sign approvals with.
func (p Principal) signs() bool { return p.Key != "" || len(p.Passkeys) > 0 }

// principal is who sent a command on subject, if they hold role. With no
// Config.Principals (a server that authenticates nobody) the name on the
// subject is taken as given.
func (g *Gate) principal(subject, role string) (ws string, p Principal, err *events.Error) {
	code := events.CodeInvalidControl
	if role == RoleApprover {
		code = events.CodeInvalidResolution
	}
	ws, name, ok := events.CommandSubjectParts(subject)
	if !ok {
		return "", p, events.Errorf(code, "subject %s does not name a valid workspace and principal", subject)
	}
	if g.cfg.Principals == nil {
		return ws, Principal{Name: name, Role: role}, nil
	}
	p, known := g.cfg.Principals(name)
	if !known || p.Role != role {
		return "", p, events.Errorf(events.CodeNotAuthorized, "principal %q is not an %s", name, role)
	}
	return ws, p, nil
}

// handleControl answers an operator's mode control: it records the
// control, applies it to the decisions that follow, and replies.
func (g *Gate) handleControl(ctx context.Context, m *nats.Msg) {
	ws, who, perr := g.principal(m.Subject, RoleOperator)
	if perr != nil {
		g.respond(m, events.Reply{Code: perr.Code, Message: perr.Message})
		return
	}
	c, err := events.ParseModeControl(m.Data, policy.ValidMode, g.cfg.Clock())
	if err != nil {
		e := err.(*events.Error)
		g.respond(m, events.Reply{Code: e.Code, Message: e.Message})
		return
	}
	ms := &events.ModeSet{Workspace: ws, Mode: c.Mode, Actor: who.Name, ActorKey: who.Key, Reason: c.Reason, ExpiresAt: c.ExpiresAt}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	seq, err := g.record(ctx, events.ModeSubject(ws), events.TypeModeSet, ws, ms)
	if err != nil {
		g.cfg.Logger.Warn("mode control not recorded", "ws", ws, "err", err)
		g.respond(m, events.Reply{Code: events.CodeUnavailable, Message: "record the control: " + err.Error()})
		return
	}
	g.modes.set(ms, seq)
	g.cfg.Logger.Info("mode control", "ws", ws, "mode", ms.Mode, "actor", who.Name, "reason", c.Reason, "seq", seq)
	g.respond(m, events.Reply{Mode: ms})
}

// record appends a non-op event (a control, a policy change) to the ops
// stream and returns its sequence.
func (g *Gate) record(ctx context.Context, subject string, t events.Type, ceSubject string, data any, opts ...jetstream.PublishOpt) (uint64, error) {
	body, err := events.MarshalJSON(data)
	if err != nil {
		return 0, err
	}
	msg := events.NewMessage(subject, t, Source, ceSubject, nuid.Next(), body)
	ack, err := g.cfg.JetStream.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return 0, fmt.Errorf("record %s: %w", t.Short(), err)
	}
	return ack.Sequence, nil
}

// respond answers a command's NATS request, if its reply subject is an
// inbox (events.ValidResponse): an answer is never published anywhere
// else, so a command cannot make the gate publish onto a stream's
// subjects.
func (g *Gate) respond(m *nats.Msg, r events.Reply) {
	if !events.ValidResponse(m.Reply) {
		return
	}
	body, _ := events.MarshalJSON(r)
	if err := m.Respond(body); err != nil {
		g.cfg.Logger.Debug("respond", "subject", m.Reply, "err", err)
	}
}
