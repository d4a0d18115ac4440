package events_test

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestApprovalSignAndVerify(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	s := events.ApprovalStatement{HoldID: "hold_" + hex32, OpID: "op_" + hex32, Workspace: "w", ArgsDigest: events.Digest([]byte("{}")),
		Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("ok"), PolicyHash: "sha256:p", Approver: "ann", At: events.ApprovalTime(time.Now())}
	a, err := events.SignApproval(s, seed)
	require.NoError(t, err)
	assert.Equal(t, 1, a.Statement.V)
	assert.Equal(t, pub, a.Signature.Key)
	require.NoError(t, a.Verify(pub))
	want := s
	require.NoError(t, a.Matches(want, time.Now()))

	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	otherPub, _ := other.PublicKey()
	assert.ErrorIs(t, a.Verify(otherPub), events.ErrInvalidSignature, "another key")

	tampered := *a
	tampered.Statement.Decision = events.DecisionDeny
	assert.ErrorIs(t, tampered.Verify(pub), events.ErrInvalidSignature, "a changed statement")
	want.Decision = events.DecisionDeny
	assert.ErrorIs(t, a.Matches(want, time.Now()), events.ErrInvalidSignature)
	assert.ErrorIs(t, a.Matches(s, time.Now().Add(time.Hour)), events.ErrInvalidSignature, "too old")

	// The digest is of the canonical statement: the same statement has
	// the same digest, any change another.
	d1, err := a.Statement.Digest()
	require.NoError(t, err)
	d2, err := tampered.Statement.Digest()
	require.NoError(t, err)
	assert.NotEqual(t, d1, d2)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, d1)
}

const hex32 = "0123456789abcdef0123456789abcdef"
