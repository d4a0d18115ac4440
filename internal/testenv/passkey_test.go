package testenv_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The software passkey writes an assertion as a browser does, which the
// verifier takes; one it makes for another origin fails where the
// passkey was enrolled.
func TestPasskey(t *testing.T) {
	rp := events.RelyingParty{ID: "localhost", Origin: "http://localhost:8080"}
	pk := testenv.NewPasskey(t, rp)
	assert.Len(t, pk.CredentialID(), 16)
	d := events.Digest([]byte("statement"))
	sig := pk.Sign(d)
	parts := strings.Split(sig, ".")
	require.Len(t, parts, 3)
	clientData, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	c, err := events.WebAuthnChallenge(d)
	require.NoError(t, err)
	assert.Equal(t, `{"type":"webauthn.get","challenge":"`+base64.RawURLEncoding.EncodeToString(c)+`","origin":"http://localhost:8080","crossOrigin":false}`, string(clientData))
	authData, err := base64.RawURLEncoding.DecodeString(parts[0])
	require.NoError(t, err)
	require.Len(t, authData, 37)
	assert.Equal(t, byte(0x05), authData[32])
	assert.Equal(t, []byte{0, 0, 0, 1}, authData[33:])
	require.NoError(t, events.VerifyStatementSignature(events.AlgWebAuthn, pk.PublicKey(), d, sig))
	require.NoError(t, events.VerifyWebAuthnRelyingParty(sig, rp))

	forged := pk.SignFor(d, "https://evil.example", "evil.example")
	require.NoError(t, events.VerifyStatementSignature(events.AlgWebAuthn, pk.PublicKey(), d, forged), "an assertion, by this passkey")
	assert.ErrorIs(t, events.VerifyWebAuthnRelyingParty(forged, rp), events.ErrInvalidSignature, "for another origin")
}
