package audit_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A grant's leaf keeps the approval's digest and signature, as a version
// 2 leaf that verifies with the approver's key alone; every other leaf
// is still version 1, byte for byte.
func TestApprovalLeaves(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	op := "op_0123456789abcdef0123456789abcdef"
	ap, err := events.SignApproval(events.ApprovalStatement{HoldID: events.HoldID(op), OpID: op, Workspace: "w", ArgsDigest: events.Digest([]byte("{}")),
		Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("ok"), PolicyHash: "sha256:p", Approver: "ann", At: events.ApprovalTime(time.Now())}, seed)
	require.NoError(t, err)
	g := &events.Granted{OpHeader: events.OpHeader{OpID: op, Workspace: "w"}, HoldID: events.HoldID(op), ArgsDigest: ap.Statement.ArgsDigest,
		Approver: "ann", ApproverKey: pub, Reason: "ok", Approval: ap}
	subject := events.OpEventSubject("w", op, "exec", events.TypeGranted)
	l := audit.NewLeaf("AIRLOCK_OPS", subject, 7, time.Now(), events.TypeGranted, "id", "airlock/gate", "t", []byte(`{}`), g)
	b := l.Encode()
	assert.Equal(t, byte(audit.LeafVersionApproval), b[0])
	back, err := audit.DecodeLeaf(b)
	require.NoError(t, err)
	assert.Equal(t, l.Approval, back.Approval)
	st, statement, err := back.VerifyApproval()
	require.NoError(t, err)
	assert.Equal(t, ap.Statement, *st)
	d, _ := ap.Statement.Digest()
	assert.Equal(t, d, statement)

	// Another resolution's signed statement, copied into this leaf, is
	// refused: the statement says another hold, or deny.
	other, err := events.SignApproval(events.ApprovalStatement{HoldID: "hold_ffffffffffffffffffffffffffffffff", OpID: op, Workspace: "w", Decision: events.DecisionGrant,
		Approver: "ann", At: events.ApprovalTime(time.Now())}, seed)
	require.NoError(t, err)
	g.Approval = other
	copied := audit.NewLeaf("AIRLOCK_OPS", subject, 7, time.Now(), events.TypeGranted, "id", "airlock/gate", "t", []byte(`{}`), g)
	_, _, err = copied.VerifyApproval()
	assert.ErrorContains(t, err, "a statement of another resolution")
	deny, err := events.SignApproval(events.ApprovalStatement{HoldID: events.HoldID(op), OpID: op, Workspace: "w", ArgsDigest: ap.Statement.ArgsDigest,
		Decision: events.DecisionDeny, Approver: "ann", At: events.ApprovalTime(time.Now())}, seed)
	require.NoError(t, err)
	g.Approval = deny
	denied := audit.NewLeaf("AIRLOCK_OPS", subject, 7, time.Now(), events.TypeGranted, "id", "airlock/gate", "t", []byte(`{}`), g)
	_, _, err = denied.VerifyApproval()
	assert.ErrorContains(t, err, "decision")
	// A statement changed in the leaf no longer verifies.
	forged := *back
	forged.Approval = strings.Replace(back.Approval, `"decision":"grant"`, `"decision":"deny"`, 1)
	_, _, err = forged.VerifyApproval()
	assert.ErrorIs(t, err, events.ErrInvalidSignature)
	g.Approval = ap

	// Without an approval: version 1, as before.
	g.Approval = nil
	plain := audit.NewLeaf("AIRLOCK_OPS", subject, 7, time.Now(), events.TypeGranted, "id", "airlock/gate", "t", []byte(`{}`), g)
	assert.Equal(t, byte(audit.LeafVersion), plain.Encode()[0])
	_, _, err = plain.VerifyApproval()
	assert.Error(t, err)
	// A version 2 leaf with an empty approval is not canonical, for the
	// decoder and the verifier's check alike.
	bad := plain.Encode()
	bad[0] = audit.LeafVersionApproval
	bad = append(bad, 0)
	_, err = audit.DecodeLeaf(bad)
	assert.ErrorIs(t, err, audit.ErrBadLeaf)
	_, _, _, err = audit.CheckLeafOp(bad)
	assert.ErrorIs(t, err, audit.ErrBadLeaf)
	_, _, _, err = audit.CheckLeafOp(b)
	assert.NoError(t, err)
}

// A passkey's approval (a WebAuthn assertion) makes a version 2 leaf as
// an nkey's does, and verifies the same way, with the key the leaf
// records; a change to the statement, the authenticator data, the client
// data, the signature or the key fails it.
func TestWebAuthnApprovalLeaves(t *testing.T) {
	rp := events.RelyingParty{ID: "example.com", Origin: "https://inbox.example.com"}
	pk := testenv.NewPasskey(t, rp)
	op := "op_0123456789abcdef0123456789abcdef"
	ap := pk.Approve(events.ApprovalStatement{HoldID: events.HoldID(op), OpID: op, Workspace: "w", ArgsDigest: events.Digest([]byte("{}")),
		OperandsDigest: events.OperandsDigest(nil), Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("ok"), PolicyHash: "sha256:p",
		Approver: "ann", At: events.ApprovalTime(time.Now())})
	g := &events.Granted{OpHeader: events.OpHeader{OpID: op, Workspace: "w"}, HoldID: events.HoldID(op), ArgsDigest: ap.Statement.ArgsDigest,
		Approver: "ann", ApproverKey: pk.PublicKey(), Reason: "ok", Approval: ap}
	subject := events.OpEventSubject("w", op, "exec", events.TypeGranted)
	l := audit.NewLeaf("AIRLOCK_OPS", subject, 7, time.Now(), events.TypeGranted, "id", "airlock/gate", "t", []byte(`{}`), g)
	b := l.Encode()
	require.Equal(t, byte(audit.LeafVersionApproval), b[0])
	back, err := audit.DecodeLeaf(b)
	require.NoError(t, err)
	_, _, _, err = audit.CheckLeafOp(b)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(back.Approval, events.AlgWebAuthn+" "+pk.PublicKey()+" "), back.Approval)
	st, digest, err := back.VerifyApproval()
	require.NoError(t, err)
	assert.Equal(t, ap.Statement, *st)
	want, _ := ap.Statement.Digest()
	assert.Equal(t, want, digest)
	parsed, err := back.ParseApproval()
	require.NoError(t, err)
	assert.Equal(t, *ap, *parsed)
	require.NoError(t, events.VerifyWebAuthnRelyingParty(parsed.Signature.Sig, rp))

	// sigPart changes one decoded part of the assertion (0 authData, 1
	// clientDataJSON, 2 signature) and writes the leaf's approval again.
	sigPart := func(i int, f func([]byte) []byte) string {
		p := strings.Split(ap.Signature.Sig, ".")
		raw, err := base64.RawURLEncoding.DecodeString(p[i])
		require.NoError(t, err)
		p[i] = base64.RawURLEncoding.EncodeToString(f(raw))
		return strings.Replace(back.Approval, ap.Signature.Sig, strings.Join(p, "."), 1)
	}
	other := testenv.NewPasskey(t, rp)
	for _, c := range []struct {
		name, approval, actorKey, want string
		// other: refused before the signature is checked, not with
		// INVALID_SIGNATURE
		other bool
	}{
		{name: "statement", approval: strings.Replace(back.Approval, `"decision":"grant"`, `"decision":"deny"`, 1), want: "INVALID_SIGNATURE"},
		{name: "authData", approval: sigPart(0, func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), want: "does not verify"},
		{name: "clientData", approval: sigPart(1, func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"crossOrigin":false`, `"crossOrigin":true`, 1))
		}), want: "does not verify"},
		{name: "signature", approval: sigPart(2, func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), want: "does not verify"},
		{name: "key in the approval", approval: strings.Replace(back.Approval, pk.PublicKey(), other.PublicKey(), 1), want: "not by the actor's key", other: true},
		{name: "key in the approval and the leaf", approval: strings.Replace(back.Approval, pk.PublicKey(), other.PublicKey(), 1), actorKey: other.PublicKey(), want: "does not verify"},
		{name: "algorithm", approval: strings.Replace(back.Approval, events.AlgWebAuthn+" ", events.AlgEd25519+" ", 1), want: "INVALID_SIGNATURE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			forged := *back
			forged.Approval = c.approval
			if c.actorKey != "" {
				forged.ActorKey = c.actorKey
			}
			require.NotEqual(t, back.Approval, forged.Approval)
			_, _, err := forged.VerifyApproval()
			require.Error(t, err)
			assert.ErrorContains(t, err, c.want)
			if !c.other {
				assert.ErrorIs(t, err, events.ErrInvalidSignature)
			}
		})
	}
}
