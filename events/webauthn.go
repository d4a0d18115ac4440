package events

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"strings"
)

// A passkey approves with a WebAuthn assertion (AlgWebAuthn, ADR 0021):
// the browser's navigator.credentials.get with the statement's digest as
// the challenge. The approval's Key is the passkey's public key (PKIX
// DER, base64url without padding: ECDSA P-256, Ed25519 or RSA), its Sig
// the assertion's three parts (WebAuthnSignature). What the passkey
// signs is the authenticator data and the SHA-256 of the client data
// JSON, which names the challenge, the page's origin and that it is an
// assertion ("webauthn.get").

// Flags of the authenticator data.
const (
	webauthnUP = 0x01 // user present
	webauthnUV = 0x04 // user verified
)

// webauthnAuthDataMin is the length of authenticator data without
// extensions: the RP ID hash, the flags and the counter.
const webauthnAuthDataMin = 32 + 1 + 4

// webauthnEncoding is the one encoding of an assertion's parts and of a
// passkey's key.
var webauthnEncoding = base64.RawURLEncoding.Strict()

// decodeWebAuthn decodes s in its one encoding: base64url without
// padding, refusing what the decoder would let through (line breaks).
func decodeWebAuthn(s string) ([]byte, error) {
	b, err := webauthnEncoding.DecodeString(s)
	if err == nil && webauthnEncoding.EncodeToString(b) != s {
		err = errors.New("line breaks in it")
	}
	return b, err
}

// RelyingParty is where a passkey was enrolled: its assertions hash ID
// in their authenticator data and name Origin in their client data.
type RelyingParty struct {
	// ID is the RP ID, a domain: "example.com", "localhost".
	ID string `json:"rp_id"`
	// Origin is the origin of the page that asks for assertions, as a
	// browser writes it: "https://inbox.example.com",
	// "http://localhost:8080".
	Origin string `json:"origin"`
}

// WebAuthnChallenge is the challenge a browser passes to
// navigator.credentials.get to approve the statement whose digest is
// statementDigest ("sha256:" and 64 hex digits): the digest's 32 bytes.
// The caller owns the returned slice.
func WebAuthnChallenge(statementDigest string) ([]byte, error) {
	h, ok := strings.CutPrefix(statementDigest, "sha256:")
	raw, err := hex.DecodeString(h)
	if !ok || err != nil || len(raw) != sha256.Size || hex.EncodeToString(raw) != h {
		return nil, Errorf(CodeInvalidSignature, "statement digest %q is not sha256: and 64 lowercase hex digits (ApprovalStatement.Digest)", statementDigest)
	}
	return raw, nil
}

// WebAuthnSignature is an AlgWebAuthn approval's Sig: the authenticator
// data, client data JSON and signature of an assertion, as the browser's
// AuthenticatorAssertionResponse gives them, each base64url without
// padding, joined with ".".
func WebAuthnSignature(authData, clientDataJSON, sig []byte) string {
	return webauthnEncoding.EncodeToString(authData) + "." + webauthnEncoding.EncodeToString(clientDataJSON) + "." + webauthnEncoding.EncodeToString(sig)
}

// assertion is a decoded AlgWebAuthn Sig.
type assertion struct {
	authData, clientDataJSON, sig []byte
	client                        clientData
}

// clientData is what an assertion's client data JSON says that the
// checks read; a browser writes more (crossOrigin, topOrigin).
type clientData struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
	Origin    string `json:"origin"`
	// CrossOrigin is true when the page that asked was framed by
	// another origin's.
	CrossOrigin bool `json:"crossOrigin"`
}

func (a *assertion) rpIDHash() []byte { return a.authData[:32] }
func (a *assertion) flags() byte      { return a.authData[32] }

// parseAssertion decodes an AlgWebAuthn Sig: three parts, authenticator
// data long enough for its fixed fields, client data that is JSON.
func parseAssertion(sig string) (*assertion, error) {
	parts := strings.Split(sig, ".")
	if len(parts) != 3 {
		return nil, Errorf(CodeInvalidSignature, "a webauthn signature is authenticatorData.clientDataJSON.signature, each base64url without padding (events.WebAuthnSignature); this one has %d parts", len(parts))
	}
	var a assertion
	for i, dst := range []*[]byte{&a.authData, &a.clientDataJSON, &a.sig} {
		b, err := decodeWebAuthn(parts[i])
		if err != nil {
			return nil, Errorf(CodeInvalidSignature, "webauthn %s is not base64url without padding: %v; encode the browser's bytes with events.WebAuthnSignature", [...]string{"authenticatorData", "clientDataJSON", "signature"}[i], err)
		}
		*dst = b
	}
	if len(a.authData) < webauthnAuthDataMin {
		return nil, Errorf(CodeInvalidSignature, "webauthn authenticatorData is %d bytes, shorter than its %d fixed ones: pass the assertion's authenticatorData as the browser gives it", len(a.authData), webauthnAuthDataMin)
	}
	if len(a.sig) == 0 {
		return nil, Errorf(CodeInvalidSignature, "webauthn signature is empty: pass the assertion's signature as the browser gives it")
	}
	if err := json.Unmarshal(a.clientDataJSON, &a.client); err != nil {
		return nil, Errorf(CodeInvalidSignature, "webauthn clientDataJSON is not a JSON object: %v; pass the assertion's clientDataJSON as the browser gives it", err)
	}
	return &a, nil
}

// verifyWebAuthn checks an AlgWebAuthn Sig by key over the statement
// whose digest is statement, with nothing but the assertion itself: it
// is an assertion whose challenge is the statement's digest, made by a
// present user for an RP ID its own origin may use, and the signature
// verifies with key.
func verifyWebAuthn(key, statement, sig string) error {
	a, err := parseAssertion(sig)
	if err != nil {
		return err
	}
	if a.client.Type != "webauthn.get" {
		return Errorf(CodeInvalidSignature, "webauthn clientDataJSON type is %q, not \"webauthn.get\": approve with navigator.credentials.get", a.client.Type)
	}
	challenge, err := WebAuthnChallenge(statement)
	if err != nil {
		return err
	}
	if c := a.client.Challenge; c != webauthnEncoding.EncodeToString(challenge) && c != base64.URLEncoding.EncodeToString(challenge) {
		return Errorf(CodeInvalidSignature, "webauthn challenge %q is not the statement %s: the passkey approved another statement; sign with events.WebAuthnChallenge of this one", c, statement)
	}
	ids, err := originRPIDs(a.client.Origin)
	if err != nil {
		return err
	}
	if !matchesRPID(a.rpIDHash(), ids) {
		return Errorf(CodeInvalidSignature, "webauthn authenticatorData is for an RP ID that origin %q may not use (neither %s): the assertion was made for another site", a.client.Origin, strings.Join(ids, " nor "))
	}
	if a.flags()&webauthnUP == 0 {
		return Errorf(CodeInvalidSignature, "webauthn authenticatorData does not have the user-present flag (UP): the approver must touch the authenticator")
	}
	pub, err := parseWebAuthnKey(key)
	if err != nil {
		return err
	}
	cd := sha256.Sum256(a.clientDataJSON)
	signed := append(append(make([]byte, 0, len(a.authData)+len(cd)), a.authData...), cd[:]...)
	if !verifyWebAuthnSig(pub, signed, a.sig) {
		return Errorf(CodeInvalidSignature, "the webauthn signature does not verify over the assertion of statement %s with the approval's key: it was made by another passkey, or its authenticatorData or clientDataJSON were changed", statement)
	}
	return nil
}

// VerifyWebAuthnRelyingParty checks that the AlgWebAuthn Sig sig was
// made where its passkey was enrolled: its client data's origin is
// rp.Origin, its RP ID hash is that of rp.ID, and the authenticator
// verified the user (UV), as a passkey does. It checks nothing of the
// signature: VerifyStatementSignature (or Approval.Verify) does. Every
// failure is an *Error with CodeInvalidSignature.
func VerifyWebAuthnRelyingParty(sig string, rp RelyingParty) error {
	if rp.ID == "" || rp.Origin == "" {
		return Errorf(CodeInvalidSignature, "the passkey's relying party has no rp_id or no origin (%q, %q): give both, as the passkey was enrolled", rp.ID, rp.Origin)
	}
	a, err := parseAssertion(sig)
	if err != nil {
		return err
	}
	if a.client.Origin != rp.Origin {
		return Errorf(CodeInvalidSignature, "the webauthn assertion was made at origin %q, not at %q where the passkey was enrolled: approve from %s", a.client.Origin, rp.Origin, rp.Origin)
	}
	if a.client.CrossOrigin {
		return Errorf(CodeInvalidSignature, "the webauthn assertion was made in a frame of another site (crossOrigin): approve from %s itself", rp.Origin)
	}
	if h := sha256.Sum256([]byte(rp.ID)); !bytes.Equal(a.rpIDHash(), h[:]) {
		return Errorf(CodeInvalidSignature, "the webauthn assertion is for another RP ID than %q, where the passkey was enrolled: approve from %s", rp.ID, rp.Origin)
	}
	if a.flags()&webauthnUV == 0 {
		return Errorf(CodeInvalidSignature, "the webauthn assertion does not have the user-verified flag (UV): approve with userVerification \"required\"")
	}
	return nil
}

// originRPIDs lists the RP IDs a page of origin may use: its host and,
// for a domain name, each parent domain of two labels or more (without
// the public suffix list, a registrable domain cannot be told from a
// suffix such as "co.uk"; a bare top-level domain is never one).
func originRPIDs(origin string) ([]string, error) {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || origin != u.Scheme+"://"+u.Host {
		return nil, Errorf(CodeInvalidSignature, "webauthn clientDataJSON origin %q is not an http or https origin: pass the assertion's clientDataJSON as the browser gives it", origin)
	}
	host := u.Hostname()
	ids := []string{host}
	if net.ParseIP(host) != nil {
		return ids, nil
	}
	for d := host; ; {
		_, parent, ok := strings.Cut(d, ".")
		if !ok || !strings.Contains(parent, ".") {
			return ids, nil
		}
		ids, d = append(ids, parent), parent
	}
}

// matchesRPID reports whether hash is the SHA-256 of one of ids.
func matchesRPID(hash []byte, ids []string) bool {
	for _, id := range ids {
		if h := sha256.Sum256([]byte(id)); bytes.Equal(hash, h[:]) {
			return true
		}
	}
	return false
}

// parseWebAuthnKey decodes a passkey's public key: base64url without
// padding of its PKIX DER, an ECDSA P-256, Ed25519 or RSA key.
func parseWebAuthnKey(key string) (crypto.PublicKey, error) {
	der, err := decodeWebAuthn(key)
	if err != nil {
		return nil, Errorf(CodeInvalidSignature, "passkey key is not base64url without padding: %v; give the passkey's public key as base64url of its PKIX DER", err)
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, Errorf(CodeInvalidSignature, "passkey key is not a PKIX public key: %v; give the passkey's public key as base64url of its PKIX DER (x509.MarshalPKIXPublicKey)", err)
	}
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, Errorf(CodeInvalidSignature, "passkey key is ECDSA on %s: a passkey's ECDSA key (ES256) is on P-256", k.Curve.Params().Name)
		}
	case ed25519.PublicKey, *rsa.PublicKey:
	default:
		return nil, Errorf(CodeInvalidSignature, "passkey key is a %T: a passkey's key is ECDSA P-256 (ES256), Ed25519 (EdDSA) or RSA (RS256)", pub)
	}
	return pub, nil
}

// verifyWebAuthnSig checks sig over signed with pub as its algorithm
// signs an assertion: ES256 (ASN.1 DER), EdDSA, RS256 (PKCS #1 v1.5).
func verifyWebAuthnSig(pub crypto.PublicKey, signed, sig []byte) bool {
	h := sha256.Sum256(signed)
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return ecdsa.VerifyASN1(k, h[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(k, signed, sig)
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, h[:], sig) == nil
	}
	return false
}
