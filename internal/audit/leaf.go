package audit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
)

// LeafVersion is the version byte every leaf starts with. A new field or a
// new meaning makes a new version; a verifier reads every version it knows.
// Version 2 adds Approval after every field of version 1; a leaf without
// an approval is written as version 1, so every leaf of an older log keeps
// its bytes and its hash.
const (
	LeafVersion         = 1
	LeafVersionApproval = 2
)

// MaxLeafBytes bounds one encoded leaf. Every field is a name, a digest or
// a short code, so a real leaf is a few hundred bytes.
const MaxLeafBytes = 16 << 10

// Leaf is the audit record of one event: who did what to which op, under
// which policy, with the digests of what went in and came out, and where the
// event is stored. It never holds argument or output plaintext.
type Leaf struct {
	Stream   string // the stream that stores the event
	Subject  string // its subject
	Seq      uint64 // its stream sequence
	Stored   time.Time
	Type     string // the CloudEvents type
	ID       string // the CloudEvents id
	Source   string // the CloudEvents source
	Time     string // the time the event claims (ce-time), as it was written
	Digest   string // SHA-256 of the event's stored data
	Space    string // workspace
	Op       string
	Hold     string
	Tool     string
	Agent    string
	Actor    string // the approver, operator or runner the event names
	ActorKey string // the credential the actor's request came from
	Policy   string // the policy hash of a decision
	Args     string // the args digest (or, for a rejection, the request's)
	Result   string // the result digest of a completed op
	Code     string // the code of a denial, failure, ambiguity or rejection
	Attempt  string
	// Approval is the approver's signed statement of a grant or deny
	// (ADR 0021): "<alg> <key> <signature> <statement>", the statement
	// in canonical JSON, which VerifyApproval checks with the key alone
	// and against the leaf's own fields; empty for every other leaf.
	Approval string
}

// fields lists the leaf's fields in their encoded order: those of its
// version.
func (l *Leaf) fields() []*string {
	f := []*string{&l.Stream, &l.Subject, &l.Type, &l.ID, &l.Source, &l.Time, &l.Digest,
		&l.Space, &l.Op, &l.Hold, &l.Tool, &l.Agent, &l.Actor, &l.ActorKey, &l.Policy,
		&l.Args, &l.Result, &l.Code, &l.Attempt}
	if l.Approval != "" {
		f = append(f, &l.Approval)
	}
	return f
}

// version is the leaf's version: LeafVersionApproval with an approval.
func (l *Leaf) version() byte {
	if l.Approval != "" {
		return LeafVersionApproval
	}
	return LeafVersion
}

// fieldsOf is the number of string fields of a leaf of version v, or 0
// for a version this verifier does not know.
func fieldsOf(v byte) int {
	switch v {
	case LeafVersion:
		return leafFields
	case LeafVersionApproval:
		return leafFields + 1
	}
	return 0
}

// Encode returns the leaf's canonical bytes: the version byte, the stream
// sequence and the stored time (uvarints, nanoseconds since the epoch), then
// each field as a uvarint length and its bytes, in a fixed order. Every leaf
// has exactly one encoding and every encoding exactly one leaf.
func (l *Leaf) Encode() []byte {
	b := make([]byte, 0, 256)
	b = append(b, l.version())
	b = binary.AppendUvarint(b, l.Seq)
	b = binary.AppendUvarint(b, uint64(l.Stored.UnixNano()))
	for _, f := range l.fields() {
		b = binary.AppendUvarint(b, uint64(len(*f)))
		b = append(b, *f...)
	}
	return b
}

// ErrBadLeaf wraps every reason DecodeLeaf refuses bytes.
var ErrBadLeaf = errors.New("audit: bad leaf")

// DecodeLeaf parses a leaf. It refuses anything Encode would not have
// written: another version, a truncated or overlong field, trailing bytes,
// a non-minimal length.
func DecodeLeaf(b []byte) (*Leaf, error) {
	if len(b) > MaxLeafBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrBadLeaf, len(b), MaxLeafBytes)
	}
	if len(b) == 0 || fieldsOf(b[0]) == 0 {
		return nil, fmt.Errorf("%w: unknown version", ErrBadLeaf)
	}
	r := b[1:]
	next := func() (uint64, error) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, fmt.Errorf("%w: truncated", ErrBadLeaf)
		}
		r = r[n:]
		return v, nil
	}
	l := new(Leaf)
	if b[0] == LeafVersionApproval {
		l.Approval = "-" // makes fields() list it; decoded below
	}
	var err error
	if l.Seq, err = next(); err != nil {
		return nil, err
	}
	ns, err := next()
	if err != nil {
		return nil, err
	}
	l.Stored = time.Unix(0, int64(ns)).UTC()
	for _, f := range l.fields() {
		n, err := next()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(r)) {
			return nil, fmt.Errorf("%w: field longer than the leaf", ErrBadLeaf)
		}
		*f = string(r[:n])
		r = r[n:]
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadLeaf, len(r))
	}
	// Lengths and numbers written with more bytes than needed decode to
	// the same leaf; only the canonical bytes are a leaf.
	if !bytes.Equal(l.Encode(), b) {
		return nil, fmt.Errorf("%w: not canonical", ErrBadLeaf)
	}
	return l, nil
}

// checkLeaf validates what DecodeLeaf would, without building the leaf:
// the version, minimal uvarints, every field within the leaf, no trailing
// bytes. It returns the stream (a slice of b) and the sequence: all a
// verifier needs of a leaf besides its hash.
func checkLeaf(b []byte) (stream []byte, seq uint64, err error) {
	stream, _, seq, err = checkLeafOp(b)
	return stream, seq, err
}

// checkLeafOp is checkLeaf that also returns the op field.
func checkLeafOp(b []byte) (stream, op []byte, seq uint64, err error) {
	if len(b) > MaxLeafBytes {
		return nil, nil, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrBadLeaf, len(b), MaxLeafBytes)
	}
	if len(b) == 0 || fieldsOf(b[0]) == 0 {
		return nil, nil, 0, fmt.Errorf("%w: unknown version", ErrBadLeaf)
	}
	nfields := fieldsOf(b[0])
	r := b[1:]
	next := func() (uint64, error) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, fmt.Errorf("%w: truncated", ErrBadLeaf)
		}
		var tmp [binary.MaxVarintLen64]byte
		if binary.PutUvarint(tmp[:], v) != n {
			return 0, fmt.Errorf("%w: not canonical", ErrBadLeaf)
		}
		r = r[n:]
		return v, nil
	}
	if seq, err = next(); err != nil {
		return nil, nil, 0, err
	}
	if _, err = next(); err != nil {
		return nil, nil, 0, err
	}
	for f := range nfields {
		n, err := next()
		if err != nil {
			return nil, nil, 0, err
		}
		if n > uint64(len(r)) {
			return nil, nil, 0, fmt.Errorf("%w: field longer than the leaf", ErrBadLeaf)
		}
		if f == leafFields && n == 0 {
			// A version 2 leaf with an empty approval is a version 1
			// leaf written another way: Encode never writes it.
			return nil, nil, 0, fmt.Errorf("%w: not canonical", ErrBadLeaf)
		}
		switch f {
		case 0:
			stream = r[:n]
		case opField:
			op = r[:n]
		}
		r = r[n:]
	}
	if len(r) != 0 {
		return nil, nil, 0, fmt.Errorf("%w: %d trailing bytes", ErrBadLeaf, len(r))
	}
	return stream, op, seq, nil
}

// leafFields is the number of string fields of a version 1 leaf; opField
// is the position of Op among them.
var leafFields = len((&Leaf{}).fields())

const opField = 8

// NewLeaf builds the leaf of one stored event. data is the decoded event
// (events.DecodeStored), nil when the message did not decode; body is the
// stored data, of which only the digest is kept.
func NewLeaf(stream, subject string, seq uint64, stored time.Time, typ events.Type, id, source, ceTime string, body []byte, data any) *Leaf {
	l := &Leaf{
		Stream: stream, Subject: subject, Seq: seq, Stored: stored.UTC(),
		Type: string(typ), ID: id, Source: source, Time: ceTime, Digest: events.Digest(body),
	}
	// An op event names its op only when its subject names the same one:
	// the projector skips an event stored on another op's subject, and its
	// leaf must not count among that op's events (nor be indexed as one).
	if h, ok := events.IsOpEvent(data); ok {
		if ws, op, tool, _, ok := events.OpSubjectParts(subject); ok && ws == h.Workspace && op == h.OpID {
			l.Space, l.Op, l.Tool = h.Workspace, h.OpID, tool
		}
	}
	summary := func(s *events.Summary) {
		if s != nil {
			l.Agent, l.Args = s.Agent, s.ArgsDigest
		}
	}
	switch d := data.(type) {
	case *events.Decided:
		summary(d.Request)
		l.Policy = d.PolicyHash
	case *events.Held:
		summary(d.Request)
		l.Hold, l.Args, l.Policy = d.HoldID, d.ArgsDigest, d.PolicyHash
	case *events.Granted:
		l.Hold, l.Args, l.Actor, l.ActorKey = d.HoldID, d.ArgsDigest, d.Approver, d.ApproverKey
		l.Approval = approvalField(d.Approval)
	case *events.Denied:
		summary(d.Request)
		l.Hold, l.Policy, l.Code, l.Actor, l.ActorKey = d.HoldID, d.PolicyHash, string(d.Code), d.Actor, d.ActorKey
		l.Approval = approvalField(d.Approval)
	case *events.Expired:
		l.Hold = d.HoldID
	case *events.Claimed:
		l.Attempt, l.Actor = d.Attempt, d.Runner
	case *events.Started:
		l.Attempt = d.Attempt
		if d.Claim != nil {
			l.Actor = d.Claim.Runner
		}
		if d.Decision != nil {
			summary(d.Decision.Request)
			l.Policy = d.Decision.PolicyHash
		}
	case *events.Completed:
		l.Attempt, l.Result = d.Attempt, d.ResultDigest
	case *events.Failed:
		l.Attempt, l.Code = d.Attempt, string(d.Code)
	case *events.Ambiguous:
		l.Attempt, l.Code = d.Attempt, string(d.Code)
	case *events.Rejected:
		l.Code, l.Args = string(d.Code), d.Digest
	case *events.ModeSet:
		l.Space, l.Actor, l.ActorKey = d.Workspace, d.Actor, d.ActorKey
	case *events.PolicyLoaded:
		l.Policy = d.Hash
	}
	return l
}

// approvalField is the leaf's form of an approval: its algorithm, key and
// signature, then the statement in canonical JSON, space-separated; ""
// for none.
func approvalField(a *events.Approval) string {
	if a == nil {
		return ""
	}
	b, err := events.MarshalJSON(&a.Statement)
	if err == nil {
		b, err = events.Canonical(b)
	}
	if err != nil {
		return ""
	}
	return strings.Join([]string{a.Signature.Alg, a.Signature.Key, a.Signature.Sig, string(b)}, " ")
}

// Resolution reports whether the leaf records an approver's grant or
// deny of a hold: a granted event, or a denied one naming its hold and
// its actor.
func (l *Leaf) Resolution() bool {
	switch events.Type(l.Type) {
	case events.TypeGranted:
		return true
	case events.TypeDenied:
		return l.Hold != "" && l.Actor != "" && l.Code == string(events.CodeApprovalDenied)
	}
	return false
}

// ParseApproval decodes the leaf's approval, "<alg> <key> <signature>
// <statement>", without checking it: VerifyApproval does. Neither the
// algorithm nor the key nor the signature has a space, whatever the
// algorithm (an nkey's or a passkey's, ADR 0021). A leaf without an
// approval is an error.
func (l *Leaf) ParseApproval() (*events.Approval, error) {
	f := strings.SplitN(l.Approval, " ", 4)
	if len(f) != 4 || f[0] == "" || f[1] == "" || f[2] == "" {
		return nil, fmt.Errorf("audit: leaf %d has no approval", l.Seq)
	}
	s, err := events.ParseStatement([]byte(f[3]))
	if err != nil {
		return nil, fmt.Errorf("audit: approval of leaf %d: statement: %w", l.Seq, err)
	}
	return &events.Approval{Statement: *s, Signature: events.ApprovalSignature{Alg: f[0], Key: f[1], Sig: f[2]}}, nil
}

// VerifyApproval checks a leaf's approval: the signature, by its
// algorithm, verifies over the statement with the key it names, which
// must be the leaf's ActorKey, and the statement says what the leaf
// records: its hold, op, workspace, approver, decision (grant for
// granted, deny for denied) and, where the leaf has them, args digest
// and policy. It returns the statement and its digest. A leaf without an
// approval is an error. Where a passkey was enrolled is not in the leaf:
// events.VerifyWebAuthnRelyingParty checks it, given that.
func (l *Leaf) VerifyApproval() (*events.ApprovalStatement, string, error) {
	a, err := l.ParseApproval()
	if err != nil {
		return nil, "", err
	}
	s, sig := &a.Statement, a.Signature
	digest, err := s.Digest()
	if err != nil {
		return nil, "", fmt.Errorf("audit: approval of leaf %d: statement: %w", l.Seq, err)
	}
	if sig.Key != l.ActorKey {
		return nil, "", fmt.Errorf("audit: approval of leaf %d is signed by %s, not by the actor's key %s", l.Seq, sig.Key, l.ActorKey)
	}
	if err := events.VerifyStatementSignature(sig.Alg, sig.Key, digest, sig.Sig); err != nil {
		return nil, "", fmt.Errorf("audit: approval of leaf %d: %w", l.Seq, err)
	}
	decision := events.DecisionDeny
	if events.Type(l.Type) == events.TypeGranted {
		decision = events.DecisionGrant
	}
	var diffs []string
	for _, c := range [][3]string{
		{"hold_id", s.HoldID, l.Hold}, {"op_id", s.OpID, l.Op}, {"workspace", s.Workspace, l.Space},
		{"approver", s.Approver, l.Actor}, {"decision", string(s.Decision), string(decision)},
	} {
		if c[1] != c[2] {
			diffs = append(diffs, fmt.Sprintf("%s %q, the leaf %q", c[0], c[1], c[2]))
		}
	}
	if l.Args != "" && s.ArgsDigest != l.Args {
		diffs = append(diffs, fmt.Sprintf("args_digest %q, the leaf %q", s.ArgsDigest, l.Args))
	}
	if l.Policy != "" && s.PolicyHash != l.Policy {
		diffs = append(diffs, fmt.Sprintf("policy_hash %q, the leaf %q", s.PolicyHash, l.Policy))
	}
	if len(diffs) > 0 {
		return nil, "", fmt.Errorf("audit: approval of leaf %d is a statement of another resolution: %s", l.Seq, strings.Join(diffs, "; "))
	}
	return s, digest, nil
}
