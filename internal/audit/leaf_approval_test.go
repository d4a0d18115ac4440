package audit_test

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
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
		Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("ok"), PolicyHash: "sha256:p", Approver: "ann", At: time.Now()}, seed)
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
	key, statement, err := back.VerifyApproval()
	require.NoError(t, err)
	assert.Equal(t, pub, key)
	d, _ := ap.Statement.Digest()
	assert.Equal(t, d, statement)

	// A leaf whose approval was changed does not verify.
	other, _ := events.SignApproval(events.ApprovalStatement{HoldID: events.HoldID(op), OpID: op, Decision: events.DecisionDeny, At: time.Now()}, seed)
	forged := *back
	od, _ := other.Statement.Digest()
	forged.Approval = "ed25519-nkey " + pub + " " + od + " " + ap.Signature.Sig
	_, _, err = forged.VerifyApproval()
	assert.ErrorIs(t, err, events.ErrInvalidSignature)

	// Without an approval: version 1, as before.
	g.Approval = nil
	plain := audit.NewLeaf("AIRLOCK_OPS", subject, 7, time.Now(), events.TypeGranted, "id", "airlock/gate", "t", []byte(`{}`), g)
	assert.Equal(t, byte(audit.LeafVersion), plain.Encode()[0])
	_, _, err = plain.VerifyApproval()
	assert.Error(t, err)
	// A version 2 leaf with an empty approval is not canonical.
	bad := plain.Encode()
	bad[0] = audit.LeafVersionApproval
	bad = append(bad, 0)
	_, err = audit.DecodeLeaf(bad)
	assert.ErrorIs(t, err, audit.ErrBadLeaf)
}
