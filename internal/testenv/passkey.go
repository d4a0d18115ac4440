package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/require"
)

// Passkey is a passkey in software (ECDSA P-256, ES256) enrolled at a
// relying party: it makes WebAuthn assertions as a browser and an
// authenticator together make them, for approvals signed with
// events.AlgWebAuthn. It is safe for concurrent use.
type Passkey struct {
	t       testing.TB
	key     *ecdsa.PrivateKey
	id      []byte
	rp      events.RelyingParty
	mu      sync.Mutex
	counter uint32 // the signature counter of the last assertion
}

// NewPasskey makes a passkey enrolled at rp.
func NewPasskey(t testing.TB, rp events.RelyingParty) *Passkey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	id := make([]byte, 16)
	_, err = rand.Read(id)
	require.NoError(t, err)
	return &Passkey{t: t, key: key, id: id, rp: rp}
}

// PublicKey is the passkey's public key as an approval names it:
// base64url without padding of its PKIX DER.
func (p *Passkey) PublicKey() string {
	der, err := x509.MarshalPKIXPublicKey(&p.key.PublicKey)
	require.NoError(p.t, err)
	return base64.RawURLEncoding.EncodeToString(der)
}

// CredentialID is the passkey's credential id. The caller must not
// change the returned slice.
func (p *Passkey) CredentialID() []byte { return p.id }

// RelyingParty is where the passkey was enrolled.
func (p *Passkey) RelyingParty() events.RelyingParty { return p.rp }

// Sign returns the Sig of an assertion over the statement whose digest
// is statementDigest, made at the relying party the passkey was enrolled
// at, by a present and verified user.
func (p *Passkey) Sign(statementDigest string) string {
	return p.SignFor(statementDigest, p.rp.Origin, p.rp.ID)
}

// SignFor is Sign as a page of origin would have the browser make it,
// for the RP ID rpID: the assertion another site gets when it asks the
// passkey to sign.
func (p *Passkey) SignFor(statementDigest, origin, rpID string) string {
	p.t.Helper()
	challenge, err := events.WebAuthnChallenge(statementDigest)
	require.NoError(p.t, err)
	c, err := json.Marshal(base64.RawURLEncoding.EncodeToString(challenge))
	require.NoError(p.t, err)
	o, err := json.Marshal(origin)
	require.NoError(p.t, err)
	clientData := []byte(`{"type":"webauthn.get","challenge":` + string(c) + `,"origin":` + string(o) + `,"crossOrigin":false}`)
	p.mu.Lock()
	p.counter++
	counter := p.counter
	p.mu.Unlock()
	rpHash := sha256.Sum256([]byte(rpID))
	authData := append(rpHash[:], 0x05) // UP | UV
	authData = binary.BigEndian.AppendUint32(authData, counter)
	cd := sha256.Sum256(clientData)
	h := sha256.Sum256(append(append([]byte{}, authData...), cd[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, p.key, h[:])
	require.NoError(p.t, err)
	return events.WebAuthnSignature(authData, clientData, sig)
}

// Approve signs s (at version events.ApprovalVersion) with the passkey,
// as an approver's browser would.
func (p *Passkey) Approve(s events.ApprovalStatement) *events.Approval {
	p.t.Helper()
	s.V = events.ApprovalVersion
	d, err := s.Digest()
	require.NoError(p.t, err)
	return &events.Approval{Statement: s, Signature: events.ApprovalSignature{Alg: events.AlgWebAuthn, Key: p.PublicKey(), Sig: p.Sign(d)}}
}
