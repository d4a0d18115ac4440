package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// check-proof's approval checks, on leaves made here: a signed grant
// passes; a grant by a keyed approver without an approval is UNSIGNED,
// and fails with an approvers file; a grant carrying another hold's
// signed statement fails; a key other than the approvers file's fails.
func TestCheckApprovals(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	op := "op_00112233445566778899aabbccddeeff"
	args := events.Digest([]byte(`{}`))
	sign := func(hold string) *events.Approval {
		a, err := events.SignApproval(events.ApprovalStatement{HoldID: hold, OpID: op, Workspace: "w", ArgsDigest: args,
			OperandsDigest: events.OperandsDigest(nil), Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("ok"),
			Approver: "ann", At: events.ApprovalTime(time.Now())}, seed)
		require.NoError(t, err)
		return a
	}
	leaf := func(a *events.Approval) audit.ProvenLeaf {
		g := &events.Granted{OpHeader: events.OpHeader{OpID: op, Workspace: "w"}, HoldID: events.HoldID(op), ArgsDigest: args,
			Approver: "ann", ApproverKey: pub, Reason: "ok", Approval: a}
		l := audit.NewLeaf("AIRLOCK_OPS", events.OpEventSubject("w", op, "exec", events.TypeGranted), 3, time.Now(), events.TypeGranted, "id", "airlock/gate", "t", []byte(`{}`), g)
		return audit.ProvenLeaf{Index: 3, Leaf: l}
	}
	proof := func(l audit.ProvenLeaf) *audit.Proof { return &audit.Proof{Op: op, Leaves: []audit.ProvenLeaf{l}} }
	keys := map[string]string{"ann": pub}

	var out bytes.Buffer
	require.NoError(t, checkApprovals(&out, proof(leaf(sign(events.HoldID(op)))), keys, false))
	assert.Contains(t, out.String(), "approval #3: grant of "+events.HoldID(op)+" by ann")

	out.Reset()
	require.NoError(t, checkApprovals(&out, proof(leaf(nil)), nil, false))
	assert.Contains(t, out.String(), "UNSIGNED")
	assert.Error(t, checkApprovals(&out, proof(leaf(nil)), keys, false), "unsigned with an approvers file")

	err = checkApprovals(&out, proof(leaf(sign("hold_ffffffffffffffffffffffffffffffff"))), nil, false)
	assert.ErrorContains(t, err, "a statement of another resolution")

	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	err = checkApprovals(&out, proof(leaf(sign(events.HoldID(op)))), map[string]string{"ann": otherPub}, false)
	assert.ErrorContains(t, err, "but the approvers file gives ann the key")
}
