package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/approvers"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// enrollPasskey gives the inbox account name (made for the workspaces
// given) a software passkey enrolled at rp, as the inbox records one.
func enrollPasskey(t *testing.T, a *app.App, name string, rp events.RelyingParty, ws ...string) *testenv.Passkey {
	t.Helper()
	_, _, err := a.Approvers.Add(ctxT(t), name, ws, time.Hour)
	require.NoError(t, err)
	pk := testenv.NewPasskey(t, rp)
	require.NoError(t, a.Approvers.AddPasskey(ctxT(t), name, approvers.Passkey{
		PublicKey: pk.PublicKey(), RP: rp, Credential: webauthn.Credential{ID: pk.CredentialID()}, EnrolledAt: time.Now(),
	}))
	return pk
}

// An inbox approver's grant is accepted only with an assertion of a
// passkey it enrolled, made at the relying party it enrolled at, over
// exactly this resolution's statement, in a workspace it was given; the
// agent that asked never resolves its own call. Each forgery resolves
// nothing; the accepted grant records the passkey's key and signature.
func TestPasskeyApprovals(t *testing.T) {
	a, counter := holdsApp(t, app.Config{Policy: policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{
		"review": {Mode: "confirm"}, "other": {Mode: "confirm"},
	}}})
	rp := events.RelyingParty{ID: "localhost", Origin: "http://localhost:8443"}
	ann := enrollPasskey(t, a, "ann", rp, "review")
	bob := enrollPasskey(t, a, "bob", rp, "review")
	self := enrollPasskey(t, a, "agent", rp, "review") // an account named as the agent
	c := agentClient(t, a)
	held := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"file":"p.txt"}`)})
	other := submitHeld(t, c, counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"file":"q.txt"}`)})
	elsewhere := submitHeld(t, c, counter, events.Request{Workspace: "other", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"file":"r.txt"}`)})
	for _, o := range []string{held.OpID, other.OpID, elsewhere.OpID} {
		waitHeldInProjection(t, a, o)
	}
	// The inbox sends resolutions over the service's connection, under
	// the approver's name.
	as := func(name string) *producers.Approver {
		ap, err := producers.NewApprover(a.Conn, name)
		require.NoError(t, err)
		return ap
	}
	statement := func(out producers.Outcome, who string) events.ApprovalStatement {
		op, err := as(who).Hold(ctxT(t), out.HoldID)
		require.NoError(t, err)
		return events.ApprovalStatement{
			V: events.ApprovalVersion, HoldID: op.HoldID, OpID: op.ID, Workspace: op.Workspace, ArgsDigest: op.ArgsDigest,
			OperandsDigest: events.OperandsDigest(op.Operands), Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("ok"),
			PolicyHash: op.PolicyHash, Approver: who, At: events.ApprovalTime(time.Now()),
		}
	}
	wsOf := map[string]string{held.OpID: "review", other.OpID: "review", elsewhere.OpID: "other"}
	send := func(who string, out producers.Outcome, ap *events.Approval) error {
		_, err := as(who).Resolve(ctxT(t), wsOf[out.OpID], events.Resolution{HoldID: out.HoldID, ArgsDigest: out.ArgsDigest, Decision: events.DecisionGrant, Reason: "ok", Approval: ap})
		return err
	}
	digest := func(s events.ApprovalStatement) string {
		d, err := s.Digest()
		require.NoError(t, err)
		return d
	}
	for _, tc := range []struct {
		name string
		who  string
		out  producers.Outcome
		ap   func() *events.Approval
		code events.Code
	}{
		{"an assertion made for another origin", "ann", held, func() *events.Approval {
			s := statement(held, "ann")
			return &events.Approval{Statement: s, Signature: events.ApprovalSignature{Alg: events.AlgWebAuthn, Key: ann.PublicKey(), Sig: ann.SignFor(digest(s), "https://evil.example", "evil.example")}}
		}, events.CodeInvalidSignature},
		{"an assertion for this origin's host at another port", "ann", held, func() *events.Approval {
			s := statement(held, "ann")
			return &events.Approval{Statement: s, Signature: events.ApprovalSignature{Alg: events.AlgWebAuthn, Key: ann.PublicKey(), Sig: ann.SignFor(digest(s), "http://localhost:9999", "localhost")}}
		}, events.CodeInvalidSignature},
		{"a signature over another hold's statement", "ann", held, func() *events.Approval {
			s := statement(held, "ann")
			ap := ann.Approve(statement(other, "ann"))
			ap.Statement = s
			return ap
		}, events.CodeInvalidSignature},
		{"another hold's signed statement", "ann", held, func() *events.Approval { return ann.Approve(statement(other, "ann")) }, events.CodeInvalidSignature},
		{"another approver's passkey", "ann", held, func() *events.Approval { return bob.Approve(statement(held, "ann")) }, events.CodeInvalidSignature},
		{"a passkey nobody enrolled", "ann", held, func() *events.Approval {
			return testenv.NewPasskey(t, rp).Approve(statement(held, "ann"))
		}, events.CodeInvalidSignature},
		{"a workspace not given", "ann", elsewhere, func() *events.Approval { return ann.Approve(statement(elsewhere, "ann")) }, events.CodeNotAuthorized},
		{"the agent that asked", "agent", held, func() *events.Approval { return self.Approve(statement(held, "agent")) }, events.CodeNotAuthorized},
		{"no signature", "ann", held, func() *events.Approval { return nil }, events.CodeInvalidSignature},
	} {
		err := send(tc.who, tc.out, tc.ap())
		assert.Equal(t, tc.code, events.CodeOf(err), "%s: %v", tc.name, err)
	}
	for _, o := range []string{held.OpID, other.OpID, elsewhere.OpID} {
		op, err := a.Store.Op(o)
		require.NoError(t, err)
		assert.Equal(t, events.StateHeld, op.State, "nothing was resolved")
		assert.Equal(t, 0, executions(t, counter, o))
	}

	// Ann's own passkey, over this hold's statement: granted, run once.
	require.NoError(t, send("ann", held, ann.Approve(statement(held, "ann"))))
	got := waitTerminal(t, a, held.OpID)
	require.Equal(t, events.StateCompleted, got.State, got.Error)
	assert.Equal(t, 1, executions(t, counter, held.OpID))
	ops, err := a.JetStream.Stream(ctxT(t), streams.Ops)
	require.NoError(t, err)
	ev, err := oplog.LastOf(ctxT(t), ops, oplog.Op{Workspace: "review", ID: held.OpID, Tool: "count"}, events.TypeGranted)
	require.NoError(t, err)
	g := ev.Data.(*events.Granted)
	assert.Equal(t, "ann", g.Approver)
	assert.Equal(t, ann.PublicKey(), g.ApproverKey, "the grant names the passkey that signed")
	require.NotNil(t, g.Approval)
	assert.Equal(t, events.AlgWebAuthn, g.Approval.Signature.Alg)
	require.NoError(t, g.Approval.Verify(g.ApproverKey))
	require.NoError(t, events.VerifyWebAuthnRelyingParty(g.Approval.Signature.Sig, rp))

	// A removed approver's passkey resolves nothing from then on.
	require.NoError(t, a.Approvers.Remove(ctxT(t), "bob"))
	err = send("bob", other, bob.Approve(statement(other, "bob")))
	assert.Equal(t, events.CodeNotAuthorized, events.CodeOf(err), "%v", err)
}

// A hold in a workspace with a webhook is announced there, with a
// single-use link to it in the inbox; the hold does not wait for it.
func TestHoldWebhookLinksToTheInbox(t *testing.T) {
	got := make(chan []byte, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	t.Cleanup(hook.Close)
	a, counter := holdsApp(t, app.Config{UIListen: "127.0.0.1:0", Policy: policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{
		"review": {Mode: "confirm", Notify: &policy.NotifySpec{Webhook: hook.URL + "/hook"}},
	}}})
	held := submitHeld(t, agentClient(t, a), counter, events.Request{Workspace: "review", Agent: "agent", Tool: "count", Args: json.RawMessage(`{"file":"w.txt"}`)})
	var msg struct {
		Text    string `json:"text"`
		Airlock struct {
			HoldID string `json:"hold_id"`
			Link   string `json:"link"`
		} `json:"airlock"`
	}
	select {
	case b := <-got:
		require.NoError(t, json.Unmarshal(b, &msg), string(b))
	case <-time.After(20 * time.Second):
		t.Fatal("no webhook")
	}
	assert.Equal(t, held.HoldID, msg.Airlock.HoldID)
	require.True(t, strings.HasPrefix(msg.Airlock.Link, a.UIOrigin()+"/l/"), msg.Airlock.Link)
	assert.Contains(t, msg.Text, msg.Airlock.Link)
	token := strings.TrimPrefix(msg.Airlock.Link, a.UIOrigin()+"/l/")
	pass := func(*approvers.Link) error { return nil }
	l, err := a.Approvers.UseLink(ctxT(t), token, pass)
	require.NoError(t, err)
	assert.Equal(t, approvers.Link{Workspace: "review", HoldID: held.HoldID, ExpiresAt: l.ExpiresAt}, *l)
	_, err = a.Approvers.UseLink(ctxT(t), token, pass)
	assert.ErrorIs(t, err, approvers.ErrUsed, "a link works once")
}
