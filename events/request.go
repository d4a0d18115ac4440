package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
)

// Limits on a request. Each is enforced by Validate and by the gate; each is
// documented in docs/events.md.
const (
	// MaxRequestBytes bounds the body of a tool.requested event.
	MaxRequestBytes = 1 << 20
	// MaxArgsBytes bounds the canonical form of a request's args.
	MaxArgsBytes = 256 << 10
	// MaxIdempotencyKeyBytes bounds the optional idempotency key.
	MaxIdempotencyKeyBytes = 256
	// MaxResultBytes bounds the compacted result an executor may store.
	MaxResultBytes = 512 << 10
	// MaxEvidenceBytes bounds the evidence an executor records in a
	// started event (executor.Preparer).
	MaxEvidenceBytes = 128 << 10
)

// ValidName reports whether s is a valid workspace, agent or tool name:
// [a-z0-9][a-z0-9_-]{0,63}. Valid names are valid NATS subject tokens.
// (Every request checks three: a loop, not a regular expression.)
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Request is one logical tool call: the data of a tool.requested event.
type Request struct {
	Workspace      string          `json:"workspace"`
	Agent          string          `json:"agent"`
	Tool           string          `json:"tool"`
	Args           json.RawMessage `json:"args"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
}

// Validate checks names, the idempotency key and the args, and replaces
// r.Args with its canonical form. It returns an *Error with a stable code.
func (r *Request) Validate() error {
	for _, f := range []struct{ field, value string }{
		{"workspace", r.Workspace}, {"agent", r.Agent}, {"tool", r.Tool},
	} {
		if !ValidName(f.value) {
			return Errorf(CodeInvalidName, "%s %s must match [a-z0-9][a-z0-9_-]{0,63}%s", f.field, sized(f.value), badAt(f.value))
		}
	}
	if len(r.IdempotencyKey) > MaxIdempotencyKeyBytes {
		return Errorf(CodeInvalidIdempotencyKey, "idempotency_key is %d bytes, limit %d", len(r.IdempotencyKey), MaxIdempotencyKeyBytes)
	}
	for _, c := range []byte(r.IdempotencyKey) {
		if c < 0x21 || c > 0x7e {
			return Errorf(CodeInvalidIdempotencyKey, "idempotency_key must be printable ASCII without spaces")
		}
	}
	if len(bytes.TrimSpace(r.Args)) == 0 {
		return Errorf(CodeInvalidArgs, "args missing: send a JSON value ({} for none)")
	}
	canon, err := Canonical(r.Args)
	if err != nil {
		return Errorf(CodeInvalidArgs, "args: %v", err)
	}
	if len(canon) > MaxArgsBytes {
		return Errorf(CodeArgsTooLarge, "args are %d bytes in canonical form, limit %d", len(canon), MaxArgsBytes)
	}
	r.Args = canon
	return nil
}

// Fingerprint is the SHA-256 of the canonical
// {agent, args, idempotency_key, tool, workspace} object. It names the
// logical call for ever. r must have been validated.
func (r *Request) Fingerprint() [32]byte {
	var b bytes.Buffer
	b.Grow(len(r.Args) + 128)
	b.WriteString(`{"agent":`)
	writeCanonString(&b, r.Agent)
	b.WriteString(`,"args":`)
	b.Write(r.Args)
	b.WriteString(`,"idempotency_key":`)
	writeCanonString(&b, r.IdempotencyKey)
	b.WriteString(`,"tool":`)
	writeCanonString(&b, r.Tool)
	b.WriteString(`,"workspace":`)
	writeCanonString(&b, r.Workspace)
	b.WriteByte('}')
	return sha256.Sum256(b.Bytes())
}

// Identity hashes the request once and returns its fingerprint in hex and
// the op id derived from it.
func (r *Request) Identity() (fingerprint, opID string) {
	fp := r.Fingerprint()
	return hex.EncodeToString(fp[:]), OpID(fp)
}

// FingerprintHex is Fingerprint in lower-case hex.
func (r *Request) FingerprintHex() string {
	fp := r.Fingerprint()
	return hex.EncodeToString(fp[:])
}

// OpID derives the operation id from a fingerprint: "op_" and the first 128
// bits in hex. A retry days later derives the same id.
func OpID(fingerprint [32]byte) string {
	return "op_" + hex.EncodeToString(fingerprint[:16])
}

var opIDPattern = regexp.MustCompile(`^op_[0-9a-f]{32}$`)

// ValidOpID reports whether s has the form OpID produces.
func ValidOpID(s string) bool { return opIDPattern.MatchString(s) }

// ArgsDigest is "sha256:" and the hex SHA-256 of canonical args.
func ArgsDigest(canonArgs []byte) string { return Digest(canonArgs) }

// Digest is "sha256:" and the hex SHA-256 of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// OperandKeys rekeys operands, content hashes by path relative to the
// workspace root as executor.Operands returns them, by the digest of each
// path: the paths come from the args, and only their digests are stored
// (Summary.Operands). The caller owns the result; nil stays nil.
func OperandKeys(byPath map[string]string) map[string]string {
	if byPath == nil {
		return nil
	}
	out := make(map[string]string, len(byPath))
	for path, h := range byPath {
		out[Digest([]byte(path))] = h
	}
	return out
}

// badAt says where an invalid name goes wrong, without quoting it.
func badAt(name string) string {
	if len(name) > 64 {
		return ""
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '-') {
			continue
		}
		return fmt.Sprintf(": byte %d is not allowed there", i)
	}
	return ""
}

// String renders the request for logs without its args.
func (r *Request) String() string {
	return fmt.Sprintf("%s/%s/%s", r.Workspace, r.Agent, r.Tool)
}
