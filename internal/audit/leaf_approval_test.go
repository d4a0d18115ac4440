package audit_test

import (
	"strings"
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
