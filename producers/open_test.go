package producers

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/seal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A result is used only when it opens with the agent's key and has the
// digest its completed event recorded: anything else is RESULT_MISMATCH,
// and its bytes are dropped.
func TestOpenChecksTheResultAgainstItsDigest(t *testing.T) {
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	require.NoError(t, err)
	other, err := ecdh.X25519().GenerateKey(rand.Reader)
	require.NoError(t, err)
	c := &Client{opener: seal.NewOpener(priv)}
	want := []byte(`{"k":"v"}`)
	sealer := seal.NewSealer()
	ctx := context.Background()

	sealed, err := sealer.Seal(priv.PublicKey(), "op_1", want)
	require.NoError(t, err)
	o := &Outcome{OpID: "op_1", ResultDigest: events.Digest(want), sealed: sealed}
	require.NoError(t, c.open(ctx, "a1", o))
	assert.Equal(t, string(want), string(o.Result))

	// Sealed for this op, but not the result the log recorded.
	forged, err := sealer.Seal(priv.PublicKey(), "op_1", []byte(`{"k":"forged"}`))
	require.NoError(t, err)
	o = &Outcome{OpID: "op_1", ResultDigest: events.Digest(want), sealed: forged}
	err = c.open(ctx, "a1", o)
	assert.Equal(t, events.CodeResultMismatch, events.CodeOf(err))
	assert.Nil(t, o.Result)

	// Another op's, or another key's: it does not open.
	for _, s := range []func() ([]byte, error){
		func() ([]byte, error) { return sealer.Seal(priv.PublicKey(), "op_2", want) },
		func() ([]byte, error) { return sealer.Seal(other.PublicKey(), "op_1", want) },
	} {
		b, err := s()
		require.NoError(t, err)
		o = &Outcome{OpID: "op_1", ResultDigest: events.Digest(want), sealed: b}
		err = c.open(ctx, "a1", o)
		assert.Equal(t, events.CodeResultMismatch, events.CodeOf(err))
		assert.Nil(t, o.Result)
	}

	// In the clear (Airlock opened it, --no-auth), the digest still decides.
	o = &Outcome{OpID: "op_1", ResultDigest: events.Digest(want), Result: []byte(`{"k":"changed"}`)}
	err = c.open(ctx, "a1", o)
	assert.Equal(t, events.CodeResultMismatch, events.CodeOf(err))
	assert.Nil(t, o.Result)
}
