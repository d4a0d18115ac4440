package app_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A grant or deny is accepted only with a statement, signed with the
// approver's own key, that says exactly this resolution of this hold;
// every forgery is INVALID_SIGNATURE and resolves nothing. The accepted
// one is recorded in the granted event, and verifies from it alone.
func TestApprovalsAreSignedStatements(t *testing.T) {
	dir := t.TempDir()
	_, err := authority.Add(dir, "approver2", authority.RoleApprover)
	require.NoError(t, err)
	a, counter := holdsApp(t, app.Config{DataDir: dir})
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"file":"signed.txt"}`)})
	other := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"file":"other.txt"}`)})
	waitHeldInProjection(t, a, held.OpID)
	waitHeldInProjection(t, a, other.OpID)

	seed := func(name string) []byte {
		s, err := authority.Seed(a.Authority.CredsPath(name))
		require.NoError(t, err)
		return s
	}
	ap, err := producers.NewApprover(connectAs(t, a, "approver"), "approver")
	require.NoError(t, err)
	p, ok := a.Authority.Lookup("approver")
	require.True(t, ok)
	approverKey := p.PublicKey
	op, err := ap.Hold(ctxT(t), held.HoldID)
	require.NoError(t, err)
	statement := func(mod func(*events.ApprovalStatement)) events.ApprovalStatement {
		s := events.ApprovalStatement{
			HoldID: held.HoldID, OpID: held.OpID, Workspace: "review", ArgsDigest: held.ArgsDigest, OperandsDigest: events.OperandsDigest(op.Operands),
			Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("checked"), PolicyHash: op.PolicyHash, Approver: "approver", At: events.ApprovalTime(time.Now()),
		}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	send := func(ap *producers.Approver, approval *events.Approval, reason string) error {
		_, err := ap.Resolve(ctxT(t), "review", events.Resolution{HoldID: held.HoldID, ArgsDigest: held.ArgsDigest, Decision: events.DecisionGrant, Reason: reason, Approval: approval})
		return err
	}
	signed := func(s events.ApprovalStatement, key string) *events.Approval {
		ap, err := events.SignApproval(s, seed(key))
		require.NoError(t, err)
		return ap
	}
	for _, tc := range []struct {
		name     string
		approval *events.Approval
		reason   string
	}{
		{"no statement", nil, "checked"},
		{"another hold", signed(statement(func(s *events.ApprovalStatement) { s.HoldID, s.OpID = other.HoldID, other.OpID }), "approver"), "checked"},
		{"another args digest", signed(statement(func(s *events.ApprovalStatement) { s.ArgsDigest = other.ArgsDigest }), "approver"), "checked"},
		{"another decision", signed(statement(func(s *events.ApprovalStatement) { s.Decision = events.DecisionDeny }), "approver"), "checked"},
		{"another reason", signed(statement(nil), "approver"), "something else"},
		{"another policy", signed(statement(func(s *events.ApprovalStatement) { s.PolicyHash = "sha256:00" }), "approver"), "checked"},
		{"another approver's key", signed(statement(nil), "approver2"), "checked"},
		{"another approver's name", signed(statement(func(s *events.ApprovalStatement) { s.Approver = "approver2" }), "approver2"), "checked"},
		{"an old statement", signed(statement(func(s *events.ApprovalStatement) { s.At = events.ApprovalTime(time.Now().Add(-10 * time.Minute)) }), "approver"), "checked"},
		{"a statement from the future", signed(statement(func(s *events.ApprovalStatement) { s.At = events.ApprovalTime(time.Now().Add(10 * time.Minute)) }), "approver"), "checked"},
		{"a time in another form", signed(statement(func(s *events.ApprovalStatement) { s.At = time.Now().Format(time.RFC3339Nano) }), "approver"), "checked"},
		{"other operands", signed(statement(func(s *events.ApprovalStatement) {
			s.OperandsDigest = events.OperandsDigest(map[string]string{events.Digest([]byte("p")): "absent"})
		}), "approver"), "checked"},
		{"a statement changed after signing", func() *events.Approval {
			x := signed(statement(func(s *events.ApprovalStatement) { s.Decision = events.DecisionDeny }), "approver")
			x.Statement.Decision = events.DecisionGrant
			return x
		}(), "checked"},
		{"another approver's signature under this approver's key", func() *events.Approval {
			x := signed(statement(nil), "approver2")
			x.Signature.Key = approverKey
			return x
		}(), "checked"},
		{"a signature that is not base64", func() *events.Approval {
			x := signed(statement(nil), "approver")
			x.Signature.Sig = "!!"
			return x
		}(), "checked"},
		{"another algorithm", func() *events.Approval {
			x := signed(statement(nil), "approver")
			x.Signature.Alg = "webauthn-es256"
			return x
		}(), "checked"},
		{"another version", func() *events.Approval {
			x := signed(statement(nil), "approver")
			x.Statement.V = 2
			return x
		}(), "checked"},
	} {
		err := send(ap, tc.approval, tc.reason)
		assert.ErrorIs(t, err, events.ErrInvalidSignature, tc.name)
	}
	// A deny is held to the same: a grant's statement does not deny.
	_, err = ap.Resolve(ctxT(t), "review", events.Resolution{HoldID: held.HoldID, ArgsDigest: held.ArgsDigest, Decision: events.DecisionDeny,
		Reason: "checked", Approval: signed(statement(nil), "approver")})
	assert.ErrorIs(t, err, events.ErrInvalidSignature, "a grant's statement on a deny")
	op, err = ap.Hold(ctxT(t), held.HoldID)
	require.NoError(t, err)
	assert.Equal(t, events.StateHeld, op.State, "nothing was resolved")
	assert.Equal(t, 0, executions(t, counter, held.OpID))

	// Signed by its own key, through the client: accepted, and recorded.
	good, err := producers.NewApprover(connectAs(t, a, "approver"), "approver", producers.WithApproverKey(seed("approver")))
	require.NoError(t, err)
	r, err := good.Grant(ctxT(t), held.HoldID, held.ArgsDigest, "checked")
	require.NoError(t, err)
	assert.Equal(t, events.StateGranted, r.State)
	got := waitTerminal(t, a, held.OpID)
	require.Equal(t, events.StateCompleted, got.State, got.Error)

	ops, err := a.JetStream.Stream(ctxT(t), streams.Ops)
	require.NoError(t, err)
	ev, err := oplog.LastOf(ctxT(t), ops, oplog.Op{Workspace: "review", ID: held.OpID, Tool: "count"}, events.TypeGranted)
	require.NoError(t, err)
	g := ev.Data.(*events.Granted)
	require.NotNil(t, g.Approval)
	require.NoError(t, g.Approval.Verify(g.ApproverKey))
	assert.Equal(t, held.HoldID, g.Approval.Statement.HoldID)
	assert.Equal(t, events.ReasonDigest("checked"), g.Approval.Statement.ReasonDigest)

	// A denial is signed the same way.
	d, err := good.Deny(ctxT(t), other.HoldID, other.ArgsDigest, "not this one")
	require.NoError(t, err)
	assert.Equal(t, events.StateDenied, d.State)
}
