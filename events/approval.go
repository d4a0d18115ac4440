package events

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nkeys"
)

// ApprovalVersion is the version of the approval statement format.
const ApprovalVersion = 1

// ApprovalContext separates an nkey's approval signature from any other
// signature the same key makes: what it signs is this line and the
// statement's digest (ADR 0021). A WebAuthn assertion needs none: what
// a passkey signs is already its own form (webauthn.go).
const ApprovalContext = "airlock-approval-v1\n"

// MaxApprovalSkew bounds how far a statement's time may be from the
// gate's clock when the gate receives it.
const MaxApprovalSkew = 5 * time.Minute

// Signature algorithms of an approval.
const (
	// AlgEd25519 is a signature by the approver's nkey (ed25519), the key
	// of its credential, as `airlock holds grant` makes it.
	AlgEd25519 = "ed25519-nkey"
	// AlgWebAuthn is a passkey's WebAuthn assertion whose challenge is
	// the statement's digest (webauthn.go).
	AlgWebAuthn = "webauthn"
)

// ApprovalStatement is what an approver signs when it grants or denies
// a hold: the hold, the op, exactly what would run (the args' digest, the
// operands' hashes), the decision, a digest of the reason, the policy
// that held it, who, and when. Its digest is the SHA-256 of its
// canonical JSON (ADR 0021).
type ApprovalStatement struct {
	V          int    `json:"v"`
	HoldID     string `json:"hold_id"`
	OpID       string `json:"op_id"`
	Workspace  string `json:"workspace"`
	ArgsDigest string `json:"args_digest"`
	// OperandsDigest is OperandsDigest of the hashes of the files the
	// call touches, as the hold recorded them: one digest, however many
	// files, so a statement stays small.
	OperandsDigest string   `json:"operands_digest"`
	Decision       Decision `json:"decision"`
	ReasonDigest   string   `json:"reason_digest"`
	PolicyHash     string   `json:"policy_hash"`
	Approver       string   `json:"approver"`
	// At is when the approver signed, in exactly the form ApprovalTime
	// writes (UTC, milliseconds, "Z"), so that any signer writes the same
	// bytes.
	At string `json:"at"`
}

// ApprovalTimeLayout is the one form of a statement's time.
const ApprovalTimeLayout = "2006-01-02T15:04:05.000Z"

// ApprovalTime is t as a statement gives it.
func ApprovalTime(t time.Time) string { return t.UTC().Format(ApprovalTimeLayout) }

// OperandsDigest is the digest a statement gives of a hold's operands
// (path digest to content hash): of their canonical JSON, {} for none.
func OperandsDigest(operands map[string]string) string {
	if operands == nil {
		operands = map[string]string{}
	}
	b, err := MarshalJSON(operands)
	if err == nil {
		if c, cerr := Canonical(b); cerr == nil {
			b = c
		}
	}
	return Digest(b)
}

// ApprovalSignature is a signature over an ApprovalStatement.
type ApprovalSignature struct {
	// Alg is AlgEd25519 or AlgWebAuthn.
	Alg string `json:"alg"`
	// Key is the public key that signed: the nkey ("U...") for
	// AlgEd25519; for AlgWebAuthn, the passkey's public key, base64url
	// without padding of its PKIX DER.
	Key string `json:"key"`
	// Sig is the signature, base64url without padding; for AlgWebAuthn,
	// the assertion's authenticator data, client data JSON and signature,
	// each so encoded, joined with "." (WebAuthnSignature).
	Sig string `json:"sig"`
}

// Approval is a signed statement, carried by a resolution and recorded
// in the granted or denied event it leads to.
type Approval struct {
	Statement ApprovalStatement `json:"statement"`
	Signature ApprovalSignature `json:"signature"`
}

// Digest is "sha256:" and the hex SHA-256 of the statement's canonical
// JSON.
func (s *ApprovalStatement) Digest() (string, error) {
	b, err := MarshalJSON(s)
	if err != nil {
		return "", err
	}
	c, err := Canonical(b)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// signingInput is what the key signs: ApprovalContext and the digest.
func (s *ApprovalStatement) signingInput() ([]byte, error) {
	d, err := s.Digest()
	if err != nil {
		return nil, err
	}
	return []byte(ApprovalContext + d), nil
}

// ReasonDigest is the digest a statement gives of a reason.
func ReasonDigest(reason string) string { return Digest([]byte(reason)) }

// SignApproval signs s with the nkey seed of the approver's credential.
func SignApproval(s ApprovalStatement, seed []byte) (*Approval, error) {
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("approval: key: %w", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("approval: key: %w", err)
	}
	s.V = ApprovalVersion
	in, err := s.signingInput()
	if err != nil {
		return nil, err
	}
	sig, err := kp.Sign(in)
	if err != nil {
		return nil, fmt.Errorf("approval: sign: %w", err)
	}
	return &Approval{Statement: s, Signature: ApprovalSignature{Alg: AlgEd25519, Key: pub, Sig: base64.RawURLEncoding.EncodeToString(sig)}}, nil
}

// Verify checks that a's signature is a valid one by key over a's
// statement. It says nothing of what the statement says: Matches does.
func (a *Approval) Verify(key string) error {
	if a.Signature.Key != key {
		return Errorf(CodeInvalidSignature, "signed by key %s, not the approver's %s", a.Signature.Key, key)
	}
	d, err := a.Statement.Digest()
	if err != nil {
		return Errorf(CodeInvalidSignature, "statement: %v", err)
	}
	return VerifyStatementSignature(a.Signature.Alg, key, d, a.Signature.Sig)
}

// VerifyStatementSignature checks sig by key over the statement whose
// digest is statement: what an auditor checks with the digest alone, as
// the audit log keeps it. For AlgWebAuthn it checks the assertion with
// nothing but itself (webauthn.go); where the passkey was enrolled is
// VerifyWebAuthnRelyingParty's to check. Every failure is an *Error with
// CodeInvalidSignature.
func VerifyStatementSignature(alg, key, statement, sig string) error {
	switch alg {
	case AlgEd25519:
		return verifyNkey(key, statement, sig)
	case AlgWebAuthn:
		return verifyWebAuthn(key, statement, sig)
	}
	return Errorf(CodeInvalidSignature, "signature algorithm %q is neither %s nor %s", alg, AlgEd25519, AlgWebAuthn)
}

// verifyNkey checks an AlgEd25519 signature (base64url) by the nkey key.
func verifyNkey(key, statement, sig string) error {
	kp, err := nkeys.FromPublicKey(key)
	if err != nil {
		return Errorf(CodeInvalidSignature, "approver key %q: %v", key, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return Errorf(CodeInvalidSignature, "signature is not base64url: %v", err)
	}
	if err := kp.Verify([]byte(ApprovalContext+statement), raw); err != nil {
		return Errorf(CodeInvalidSignature, "the signature does not verify over the statement %s: it was made over another statement, or with another key", statement)
	}
	return nil
}

// Matches checks that a's statement says what want says, but for its
// time, which must be within MaxApprovalSkew of now.
func (a *Approval) Matches(want ApprovalStatement, now time.Time) error {
	s := a.Statement
	var diffs []error
	check := func(field, got, want string) {
		if got != want {
			diffs = append(diffs, fmt.Errorf("%s is %q, not %q", field, got, want))
		}
	}
	if s.V != ApprovalVersion {
		diffs = append(diffs, fmt.Errorf("v is %d, not %d", s.V, ApprovalVersion))
	}
	check("hold_id", s.HoldID, want.HoldID)
	check("op_id", s.OpID, want.OpID)
	check("workspace", s.Workspace, want.Workspace)
	check("args_digest", s.ArgsDigest, want.ArgsDigest)
	check("operands_digest", s.OperandsDigest, want.OperandsDigest)
	check("decision", string(s.Decision), string(want.Decision))
	check("reason_digest", s.ReasonDigest, want.ReasonDigest)
	check("policy_hash", s.PolicyHash, want.PolicyHash)
	check("approver", s.Approver, want.Approver)
	at, err := time.Parse(ApprovalTimeLayout, s.At)
	switch {
	case err != nil || ApprovalTime(at) != s.At:
		diffs = append(diffs, fmt.Errorf("at %q is not of the form %s", s.At, ApprovalTimeLayout))
	case now.Sub(at) > MaxApprovalSkew || now.Sub(at) < -MaxApprovalSkew:
		diffs = append(diffs, fmt.Errorf("at %s is %s from now; at most %s", s.At, now.Sub(at).Round(time.Second), MaxApprovalSkew))
	}
	if len(diffs) > 0 {
		return Errorf(CodeInvalidSignature, "the signed statement is not this resolution's: %v", errors.Join(diffs...))
	}
	return nil
}

// ParseStatement decodes a statement strictly, as the audit log keeps it
// (one JSON object, no unknown field, nothing after it).
func ParseStatement(b []byte) (*ApprovalStatement, error) {
	var s ApprovalStatement
	if err := decodeCommand(b, &s, CodeInvalidSignature); err != nil {
		return nil, err
	}
	return &s, nil
}
