package producers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultCommandTimeout bounds a resolution or control when ctx has no
// deadline.
const DefaultCommandTimeout = 10 * time.Second

// Approver resolves holds. It speaks for one principal: the one whose
// credential the connection uses. The server lets that credential publish
// only on subjects that carry its own name, and the gate records that
// name (and the credential's key) on the resolution, so the principal
// given here must be the credential's.
type Approver struct {
	nc        *nats.Conn
	principal string
	q         *Client
	seed      []byte // the approver's nkey seed; nil signs nothing
	clock     func() time.Time
}

// ApproverOption configures an Approver.
type ApproverOption func(*Approver) error

// WithApproverKey gives the approver the seed ("SU...", as in its creds
// file) of its credential: every grant and deny then carries a statement
// signed with it (events.Approval), which the gate requires of an
// approver with a key (ADR 0021). The approver keeps a copy; the caller
// may clear its own.
func WithApproverKey(seed []byte) ApproverOption {
	return func(a *Approver) error {
		if _, err := events.SignApproval(events.ApprovalStatement{}, seed); err != nil {
			return fmt.Errorf("producers: approver key: %w", err)
		}
		a.seed = append([]byte(nil), seed...)
		return nil
	}
}

// NewApprover returns an approver for principal on nc, which the caller
// owns.
func NewApprover(nc *nats.Conn, principal string, opts ...ApproverOption) (*Approver, error) {
	if !events.ValidName(principal) {
		return nil, fmt.Errorf("producers: principal %q is not a valid name", principal)
	}
	if nc == nil {
		return nil, errors.New("producers: nil connection")
	}
	a := &Approver{nc: nc, principal: principal, q: &Client{nc: nc}, clock: time.Now}
	for _, o := range opts {
		if err := o(a); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Hold returns the held (or once held) op a hold id names, from the
// projection, as of the question (events.OpQuery.Fresh): a hold its
// submitter was just told of is found. An unknown hold is an
// *events.Error with code HOLD_NOT_FOUND.
func (a *Approver) Hold(ctx context.Context, holdID string) (*events.Op, error) {
	opID, ok := events.OpOfHold(holdID)
	if !ok {
		return nil, events.Errorf(events.CodeInvalidResolution, "hold id %q is not of the form hold_<32 hex>", holdID)
	}
	var op events.Op
	err := a.q.query(ctx, events.QueryOpSubject, events.OpQuery{OpID: opID, Fresh: true}, &op)
	if errors.Is(err, &events.Error{Code: events.CodeNotFound}) || (err == nil && op.HoldID != holdID) {
		return nil, events.Errorf(events.CodeHoldNotFound, "no hold %s", holdID)
	}
	if err != nil {
		return nil, err
	}
	return &op, nil
}

// Args reads the args a held op would run with, from its request in
// AIRLOCK_REQUESTS, checked to be the op's (its fingerprint derives the op
// id), in canonical form, with their digest: what a grant names. This is
// what an approver should look at, rather than trust the digest the
// projection shows.
func (a *Approver) Args(ctx context.Context, op *events.Op) (args json.RawMessage, digest string, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultQueryTimeout)
		defer cancel()
	}
	js, err := jetstream.New(a.nc)
	if err != nil {
		return nil, "", err
	}
	st, err := js.Stream(ctx, streams.Requests)
	if err != nil {
		return nil, "", &events.Error{Code: events.CodeUnavailable, Message: "requests stream: " + err.Error(), Retryable: true}
	}
	req, err := oplog.Request(ctx, nil, st, op.RequestSeq, op.ID)
	if oplog.NotFound(err) {
		// A held op's request is kept in AIRLOCK_HELD while it is held.
		req, err = oplog.HeldRequest(ctx, a.nc, nil, op.ID)
	}
	if err != nil {
		return nil, "", err
	}
	canon, err := events.Canonical(req.Args)
	if err != nil {
		return nil, "", err
	}
	return canon, events.ArgsDigest(canon), nil
}

// ListHolds lists the pending holds, of one workspace or of all when ws is "",
// oldest first.
func (a *Approver) ListHolds(ctx context.Context, ws string) ([]*events.Op, error) {
	return a.q.ListHolds(ctx, ws)
}

// ListHolds lists the pending holds, of one workspace or of all when ws is
// "", oldest first, reading every page of the query service's answer.
func (c *Client) ListHolds(ctx context.Context, ws string) ([]*events.Op, error) {
	var out []*events.Op
	q := events.ListQuery{State: string(events.StateHeld), Workspace: ws, Limit: events.MaxPage}
	for {
		page, err := c.List(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Ops...)
		if page.Next == "" {
			return out, nil
		}
		q.Cursor = page.Next
	}
}

// Grant grants a hold: the op is decided again under the policy in force
// and runs once unless that now denies it. argsDigest must be the digest
// the hold covers. The hold's workspace is read from the projection.
func (a *Approver) Grant(ctx context.Context, holdID, argsDigest, reason string) (events.Reply, error) {
	return a.resolveHold(ctx, holdID, events.Resolution{HoldID: holdID, ArgsDigest: argsDigest, Decision: events.DecisionGrant, Reason: reason})
}

// Deny denies a hold: the op ends denied (APPROVAL_DENIED) and never runs.
func (a *Approver) Deny(ctx context.Context, holdID, argsDigest, reason string) (events.Reply, error) {
	return a.resolveHold(ctx, holdID, events.Resolution{HoldID: holdID, ArgsDigest: argsDigest, Decision: events.DecisionDeny, Reason: reason})
}

func (a *Approver) resolveHold(ctx context.Context, holdID string, res events.Resolution) (events.Reply, error) {
	op, err := a.Hold(ctx, holdID)
	if err != nil {
		return events.Reply{}, err
	}
	return a.ResolveOp(ctx, op, res)
}

// ResolveOp is Resolve for a hold whose op the caller has read already
// (Hold): an approver with a key signs res from it.
func (a *Approver) ResolveOp(ctx context.Context, op *events.Op, res events.Resolution) (events.Reply, error) {
	if a.seed != nil && res.Approval == nil {
		var err error
		if res.Approval, err = a.sign(op, res); err != nil {
			return events.Reply{}, err
		}
	}
	return command(ctx, a.nc, events.ResolveSubject(op.Workspace, a.principal), res)
}

// sign makes the signed statement of res on op's hold: what the hold
// covers as the projection shows it (the gate checks it against the held
// event itself), the decision, the reason's digest, the time.
func (a *Approver) sign(op *events.Op, res events.Resolution) (*events.Approval, error) {
	return events.SignApproval(events.ApprovalStatement{
		HoldID: res.HoldID, OpID: op.ID, Workspace: op.Workspace, ArgsDigest: res.ArgsDigest,
		OperandsDigest: events.OperandsDigest(op.Operands), Decision: res.Decision, ReasonDigest: events.ReasonDigest(res.Reason),
		PolicyHash: op.PolicyHash, Approver: a.principal, At: events.ApprovalTime(a.clock()),
	}, a.seed)
}

// Resolve sends one resolution of a hold in workspace ws. A refusal
// (HOLD_RESOLVED, HOLD_EXPIRED, GRANT_DIGEST_MISMATCH, ...) is an
// *events.Error, returned with the reply that says where the op stands.
// Sending the same resolution again is safe: the gate answers that it
// stands (Reply.Existing).
//
// An approver with a key (WithApproverKey) signs res when it carries no
// approval yet, from the hold as the projection shows it.
func (a *Approver) Resolve(ctx context.Context, ws string, res events.Resolution) (events.Reply, error) {
	if a.seed != nil && res.Approval == nil {
		op, err := a.Hold(ctx, res.HoldID)
		if err != nil {
			return events.Reply{}, err
		}
		op.Workspace = ws
		return a.ResolveOp(ctx, op, res)
	}
	return command(ctx, a.nc, events.ResolveSubject(ws, a.principal), res)
}

// Operator sets workspaces' permission modes, as the principal whose
// credential the connection uses.
type Operator struct {
	nc        *nats.Conn
	principal string
}

// NewOperator returns an operator for principal on nc, which the caller
// owns.
func NewOperator(nc *nats.Conn, principal string) (*Operator, error) {
	if !events.ValidName(principal) {
		return nil, fmt.Errorf("producers: principal %q is not a valid name", principal)
	}
	if nc == nil {
		return nil, errors.New("producers: nil connection")
	}
	return &Operator{nc: nc, principal: principal}, nil
}

// SetMode sets ws's mode (auto, confirm or locked; "" to clear the
// override), until expiresAt when it is not nil. It takes effect for the
// next decision and for every resume of a grant after it.
func (o *Operator) SetMode(ctx context.Context, ws, mode, reason string, expiresAt *time.Time) (*events.ModeSet, error) {
	if !events.ValidName(ws) {
		return nil, events.Errorf(events.CodeInvalidControl, "workspace %q is not a valid name", ws)
	}
	r, err := command(ctx, o.nc, events.ControlSubject(ws, o.principal), events.ModeControl{Mode: mode, Reason: reason, ExpiresAt: expiresAt})
	if err != nil {
		return nil, err
	}
	return r.Mode, nil
}

// command sends a resolution or control and decodes the gate's reply; a
// reply with a code (other than APPROVAL_REQUIRED, which describes a held
// op) is returned as an *events.Error too.
func command(ctx context.Context, nc *nats.Conn, subject string, in any) (events.Reply, error) {
	resp, err := request(ctx, nc, subject, in, DefaultCommandTimeout)
	if err != nil {
		return events.Reply{}, err
	}
	var r events.Reply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return events.Reply{}, events.Errorf(events.CodeInternal, "decode reply on %s: %v", subject, err)
	}
	if r.Code != "" && r.Code != events.CodeApprovalRequired {
		return r, &events.Error{Code: r.Code, Message: r.Message, Retryable: r.Code == events.CodeUnavailable}
	}
	return r, nil
}

// Op returns an op from the projection, as Client.Op does: where a hold
// went after its resolution.
func (a *Approver) Op(ctx context.Context, id string) (*events.Op, error) { return a.q.Op(ctx, id) }
