package events_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// softKey is a passkey in software, as a browser and an authenticator
// together would make its assertions (internal/testenv has the one the
// other packages use; events is below it).
type softKey struct {
	signer crypto.Signer
	rp     events.RelyingParty
}

func newSoftKey(t testing.TB, kind string) *softKey {
	t.Helper()
	var s crypto.Signer
	var err error
	switch kind {
	case "ecdsa":
		s, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ed25519":
		_, s, err = ed25519.GenerateKey(rand.Reader)
	case "rsa":
		s, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	require.NoError(t, err)
	return &softKey{signer: s, rp: events.RelyingParty{ID: "example.com", Origin: "https://inbox.example.com"}}
}

func (k *softKey) publicKey(t testing.TB) string {
	der, err := x509.MarshalPKIXPublicKey(k.signer.Public())
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(der)
}

// assertionParts is what an assertion is made of, each part settable so
// that a test can make the one a browser would not.
type assertionParts struct {
	typ, challenge, origin, rpID string
	flags                        byte
	crossOrigin                  bool
}

func (k *softKey) parts(t testing.TB, statement string) assertionParts {
	c, err := events.WebAuthnChallenge(statement)
	require.NoError(t, err)
	return assertionParts{typ: "webauthn.get", challenge: base64.RawURLEncoding.EncodeToString(c), origin: k.rp.Origin, rpID: k.rp.ID, flags: 0x05}
}

// make returns the assertion's authenticator data, client data JSON and
// signature.
func (k *softKey) make(t testing.TB, p assertionParts) (authData, clientData, sig []byte) {
	t.Helper()
	rp := sha256.Sum256([]byte(p.rpID))
	authData = append(rp[:], p.flags)
	authData = binary.BigEndian.AppendUint32(authData, 1)
	clientData = []byte(`{"type":` + strconv.Quote(p.typ) + `,"challenge":` + strconv.Quote(p.challenge) + `,"origin":` + strconv.Quote(p.origin) + `,"crossOrigin":` + strconv.FormatBool(p.crossOrigin) + `}`)
	cd := sha256.Sum256(clientData)
	signed := append(append([]byte{}, authData...), cd[:]...)
	var err error
	switch s := k.signer.(type) {
	case ed25519.PrivateKey:
		sig = ed25519.Sign(s, signed)
	default:
		h := sha256.Sum256(signed)
		sig, err = s.Sign(rand.Reader, h[:], crypto.SHA256)
	}
	require.NoError(t, err)
	return authData, clientData, sig
}

func (k *softKey) sign(t testing.TB, p assertionParts) string {
	return events.WebAuthnSignature(k.make(t, p))
}

func testStatement(hold string) events.ApprovalStatement {
	return events.ApprovalStatement{V: events.ApprovalVersion, HoldID: hold, OpID: "op_" + hex32, Workspace: "w", ArgsDigest: events.Digest([]byte("{}")),
		OperandsDigest: events.OperandsDigest(nil), Decision: events.DecisionGrant, ReasonDigest: events.ReasonDigest("ok"), PolicyHash: "sha256:p",
		Approver: "ann", At: events.ApprovalTime(time.Now())}
}

// A passkey's assertion over a statement's digest verifies, for each
// kind of passkey key, with the statement alone and where the passkey
// was enrolled; and Approval.Verify takes it as it takes an nkey's.
func TestWebAuthnApprovalVerifies(t *testing.T) {
	for _, kind := range []string{"ecdsa", "ed25519", "rsa"} {
		t.Run(kind, func(t *testing.T) {
			k := newSoftKey(t, kind)
			s := testStatement("hold_" + hex32)
			d, err := s.Digest()
			require.NoError(t, err)
			sig := k.sign(t, k.parts(t, d))
			require.NoError(t, events.VerifyStatementSignature(events.AlgWebAuthn, k.publicKey(t), d, sig))
			require.NoError(t, events.VerifyWebAuthnRelyingParty(sig, k.rp))
			a := events.Approval{Statement: s, Signature: events.ApprovalSignature{Alg: events.AlgWebAuthn, Key: k.publicKey(t), Sig: sig}}
			require.NoError(t, a.Verify(k.publicKey(t)))
			a.Statement.Decision = events.DecisionDeny
			assert.ErrorIs(t, a.Verify(k.publicKey(t)), events.ErrInvalidSignature, "a changed statement")
		})
	}
}

// The challenge is the digest's 32 bytes; a browser writes it unpadded,
// and a padded one is taken too. The sig's parts are joined in order.
func TestWebAuthnChallengeAndSignature(t *testing.T) {
	d := events.Digest([]byte("x"))
	c, err := events.WebAuthnChallenge(d)
	require.NoError(t, err)
	assert.Len(t, c, 32)
	sum := sha256.Sum256([]byte("x"))
	assert.Equal(t, sum[:], c)
	for _, bad := range []string{"", "sha256:", "sha256:" + strings.Repeat("0", 63), "sha256:" + strings.ToUpper(d[7:]), "sha512:" + d[7:], d[7:]} {
		_, err := events.WebAuthnChallenge(bad)
		assert.ErrorIs(t, err, events.ErrInvalidSignature, bad)
	}
	assert.Equal(t, "AQ.Ag.Aw", events.WebAuthnSignature([]byte{1}, []byte{2}, []byte{3}))

	k := newSoftKey(t, "ecdsa")
	p := k.parts(t, d)
	p.challenge = base64.URLEncoding.EncodeToString(c)
	require.True(t, strings.HasSuffix(p.challenge, "="))
	assert.NoError(t, events.VerifyStatementSignature(events.AlgWebAuthn, k.publicKey(t), d, k.sign(t, p)), "a padded challenge")
}

// Every assertion a browser would not make for this statement, this
// passkey and this relying party fails with INVALID_SIGNATURE, with a
// message that says what is wrong.
func TestWebAuthnApprovalRefused(t *testing.T) {
	k := newSoftKey(t, "ecdsa")
	s := testStatement("hold_" + hex32)
	d, err := s.Digest()
	require.NoError(t, err)
	key := k.publicKey(t)
	otherHold := testStatement("hold_ffffffffffffffffffffffffffffffff")
	otherHoldDigest, err := otherHold.Digest()
	require.NoError(t, err)
	rsaKey := newSoftKey(t, "rsa")
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	require.NoError(t, err)
	p384DER, err := x509.MarshalPKIXPublicKey(p384.Public())
	require.NoError(t, err)
	valid := func() string { return k.sign(t, k.parts(t, d)) }
	one := valid()
	with := func(f func(p *assertionParts)) string {
		p := k.parts(t, d)
		f(&p)
		return k.sign(t, p)
	}
	// reencode changes one decoded part of a valid sig.
	reencode := func(f func(authData, clientData, sig []byte) ([]byte, []byte, []byte)) string {
		return events.WebAuthnSignature(f(k.make(t, k.parts(t, d))))
	}
	for _, c := range []struct {
		name, key, sig, want string
	}{
		{name: "the type of a registration", key: key, sig: with(func(p *assertionParts) { p.typ = "webauthn.create" }), want: `type is "webauthn.create"`},
		{name: "the challenge of another statement", key: key, sig: with(func(p *assertionParts) {
			p.challenge = base64.RawURLEncoding.EncodeToString(make([]byte, 32))
		}), want: "approved another statement"},
		{name: "another hold's statement", key: key, sig: k.sign(t, k.parts(t, otherHoldDigest)), want: "approved another statement"},
		{name: "changed authData", key: key, sig: reencode(func(a, c, s []byte) ([]byte, []byte, []byte) { a[36] ^= 1; return a, c, s }), want: "does not verify"},
		{name: "changed clientData", key: key, sig: reencode(func(a, c, s []byte) ([]byte, []byte, []byte) {
			return a, []byte(strings.Replace(string(c), `"crossOrigin":false`, `"crossOrigin":true`, 1)), s
		}), want: "does not verify"},
		{name: "UP unset", key: key, sig: with(func(p *assertionParts) { p.flags = 0x04 }), want: "user-present"},
		{name: "the rpIdHash of another domain", key: key, sig: with(func(p *assertionParts) { p.rpID = "evil.example" }), want: "may not use"},
		{name: "the rpIdHash of a subdomain of the origin's parent", key: key, sig: with(func(p *assertionParts) { p.rpID = "other.example.com" }), want: "may not use"},
		{name: "the rpIdHash of a top-level domain", key: key, sig: with(func(p *assertionParts) { p.rpID = "com" }), want: "may not use"},
		{name: "an origin that is not one", key: key, sig: with(func(p *assertionParts) { p.origin = "https://inbox.example.com/path" }), want: "not an http or https origin"},
		{name: "no origin", key: key, sig: with(func(p *assertionParts) { p.origin = "" }), want: "not an http or https origin"},
		{name: "signed by another key", key: rsaKey.publicKey(t), sig: valid(), want: "does not verify"},
		{name: "another passkey's key", key: newSoftKey(t, "ecdsa").publicKey(t), sig: valid(), want: "does not verify"},
		{name: "an nkey", key: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NFCNAR", sig: valid(), want: "not a PKIX public key"},
		{name: "a key that is not PKIX", key: base64.RawURLEncoding.EncodeToString([]byte("not a key")), sig: valid(), want: "not a PKIX public key"},
		{name: "a P-384 key", key: base64.RawURLEncoding.EncodeToString(p384DER), sig: valid(), want: "P-256"},
		{name: "two parts", key: key, sig: one[:strings.LastIndexByte(one, '.')], want: "has 2 parts"},
		{name: "four parts", key: key, sig: valid() + ".AA", want: "has 4 parts"},
		{name: "padded part", key: key, sig: strings.Replace(valid(), ".", "=.", 1), want: "not base64url"},
		{name: "a line break in a part", key: key, sig: strings.Replace(valid(), ".", "\n.", 1), want: "not base64url"},
		{name: "a line break in the key", key: key[:10] + "\r\n" + key[10:], sig: valid(), want: "not base64url"},
		{name: "short authData", key: key, sig: reencode(func(a, c, s []byte) ([]byte, []byte, []byte) { return a[:36], c, s }), want: "shorter than"},
		{name: "clientData not JSON", key: key, sig: reencode(func(a, c, s []byte) ([]byte, []byte, []byte) { return a, c[1:], s }), want: "not a JSON object"},
		{name: "no signature", key: key, sig: reencode(func(a, c, s []byte) ([]byte, []byte, []byte) { return a, c, nil }), want: "signature is empty"},
		{name: "a signature that is not DER", key: key, sig: reencode(func(a, c, s []byte) ([]byte, []byte, []byte) { return a, c, s[:len(s)-1] }), want: "does not verify"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := events.VerifyStatementSignature(events.AlgWebAuthn, c.key, d, c.sig)
			require.ErrorIs(t, err, events.ErrInvalidSignature)
			assert.ErrorContains(t, err, c.want)
			var e *events.Error
			require.True(t, errors.As(err, &e))
			assert.Equal(t, events.CodeInvalidSignature, e.Code)
		})
	}
	err = events.VerifyStatementSignature("webauthn-v2", key, d, valid())
	assert.ErrorIs(t, err, events.ErrInvalidSignature, "an unknown algorithm")
	assert.ErrorIs(t, events.VerifyStatementSignature(events.AlgWebAuthn, key, "sha256:nothex", valid()), events.ErrInvalidSignature, "a digest that is not one")
}

// Where the passkey was enrolled: an assertion another site's page
// asked for (its origin, or an RP ID the origin may use but the passkey
// was not enrolled at) verifies as an assertion, and fails here; so
// does one without user verification.
func TestWebAuthnRelyingPartyRefused(t *testing.T) {
	k := newSoftKey(t, "ecdsa")
	d := events.Digest([]byte("statement"))
	key := k.publicKey(t)
	with := func(f func(p *assertionParts)) string {
		p := k.parts(t, d)
		f(&p)
		return k.sign(t, p)
	}
	for _, c := range []struct {
		name, sig, want string
		rp              events.RelyingParty
		verifies        bool // as an assertion, with VerifyStatementSignature
	}{
		{name: "another site's origin", sig: with(func(p *assertionParts) { p.origin, p.rpID = "https://evil.example", "evil.example" }), rp: k.rp, want: `made at origin "https://evil.example"`, verifies: true},
		{name: "a sibling origin", sig: with(func(p *assertionParts) { p.origin = "https://wiki.example.com" }), rp: k.rp, want: `made at origin "https://wiki.example.com"`, verifies: true},
		{name: "the origin's own host as RP ID", sig: with(func(p *assertionParts) { p.rpID = "inbox.example.com" }), rp: k.rp, want: `another RP ID than "example.com"`, verifies: true},
		{name: "no user verification", sig: with(func(p *assertionParts) { p.flags = 0x01 }), rp: k.rp, want: "user-verified", verifies: true},
		{name: "http for https", sig: with(func(p *assertionParts) { p.origin = "http://inbox.example.com" }), rp: k.rp, want: "made at origin", verifies: true},
		{name: "another port", sig: with(func(p *assertionParts) { p.origin = "https://inbox.example.com:8443" }), rp: k.rp, want: "made at origin", verifies: true},
		{name: "no relying party", sig: with(func(*assertionParts) {}), rp: events.RelyingParty{}, want: "no rp_id or no origin", verifies: true},
		{name: "in another site's frame", sig: with(func(p *assertionParts) { p.crossOrigin = true }), rp: k.rp, want: "crossOrigin", verifies: true},
		{name: "malformed", sig: "a.b", rp: k.rp, want: "has 2 parts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.verifies {
				require.NoError(t, events.VerifyStatementSignature(events.AlgWebAuthn, key, d, c.sig))
			}
			err := events.VerifyWebAuthnRelyingParty(c.sig, c.rp)
			require.ErrorIs(t, err, events.ErrInvalidSignature)
			assert.ErrorContains(t, err, c.want)
		})
	}
	// localhost, as a browser makes it for a page on a port of it.
	local := newSoftKey(t, "ed25519")
	local.rp = events.RelyingParty{ID: "localhost", Origin: "http://localhost:8080"}
	sig := local.sign(t, local.parts(t, d))
	require.NoError(t, events.VerifyStatementSignature(events.AlgWebAuthn, local.publicKey(t), d, sig))
	require.NoError(t, events.VerifyWebAuthnRelyingParty(sig, local.rp))
}

// FuzzVerifyStatementSignature: a webauthn signature never panics the
// verifier nor the relying party's check, each refuses with
// INVALID_SIGNATURE only, and what verifies is in its one encoding.
func FuzzVerifyStatementSignature(f *testing.F) {
	k := newSoftKey(f, "ecdsa")
	d := events.Digest([]byte("statement"))
	valid := k.sign(f, k.parts(f, d))
	f.Add(k.publicKey(f), d, valid)
	f.Add(k.publicKey(f), d, valid+".")
	f.Add(k.publicKey(f), d, strings.ReplaceAll(valid, ".", ""))
	f.Add("", "", "..")
	f.Add(k.publicKey(f), d, strings.Replace(valid, ".", "\n.", 1))
	f.Fuzz(func(t *testing.T, key, statement, sig string) {
		err := events.VerifyStatementSignature(events.AlgWebAuthn, key, statement, sig)
		if err != nil && !errors.Is(err, events.ErrInvalidSignature) {
			t.Fatalf("error %v is not INVALID_SIGNATURE", err)
		}
		if err == nil {
			p := strings.Split(sig, ".")
			var raw [3][]byte
			for i := range p {
				raw[i], _ = base64.RawURLEncoding.DecodeString(p[i])
			}
			if again := events.WebAuthnSignature(raw[0], raw[1], raw[2]); again != sig {
				t.Fatalf("verified %q, whose parts encode as %q", sig, again)
			}
		}
		rerr := events.VerifyWebAuthnRelyingParty(sig, k.rp)
		if rerr != nil && !errors.Is(rerr, events.ErrInvalidSignature) {
			t.Fatalf("relying party: error %v is not INVALID_SIGNATURE", rerr)
		}
	})
}
