package events

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// Limits of resolutions and controls.
const (
	// MaxCommandBytes bounds the body of a resolution or a control.
	MaxCommandBytes = 16 << 10
	// MaxReasonBytes bounds the reason a resolution or control gives.
	MaxReasonBytes = 1024
)

// HoldID is the id of the hold of an op: "hold_" and the op id's hex. An op
// has at most one hold, so the hold id is as idempotent as the op: a retry
// of a held request, however late, names the same hold.
func HoldID(opID string) string { return "hold_" + strings.TrimPrefix(opID, "op_") }

// OpOfHold is the op a hold id belongs to; ok is false when holdID is not
// of the form HoldID produces.
func OpOfHold(holdID string) (opID string, ok bool) {
	hex, found := strings.CutPrefix(holdID, "hold_")
	if !found || !ValidOpID("op_"+hex) {
		return "", false
	}
	return "op_" + hex, true
}

// HoldInfo is what a submitter learns about the hold its request waits on.
type HoldInfo struct {
	HoldID string `json:"hold_id"`
	// ArgsDigest is the digest of the canonical args the hold covers; a
	// grant must name it.
	ArgsDigest string    `json:"args_digest"`
	ExpiresAt  time.Time `json:"expires_at"`
	Reason     string    `json:"reason,omitempty"`
}

// Decision names what a resolution does to a hold.
type Decision string

// Resolution decisions.
const (
	DecisionGrant Decision = "grant"
	DecisionDeny  Decision = "deny"
)

// Resolution is an approver's command on a hold, published (as a NATS
// request) on ResolveSubject. Who resolves is the principal the subject
// names, which the server's permissions tie to the approver's credential;
// the body has no field for it.
type Resolution struct {
	HoldID string `json:"hold_id"`
	// ArgsDigest must equal the digest the hold covers.
	ArgsDigest string   `json:"args_digest"`
	Decision   Decision `json:"decision"`
	Reason     string   `json:"reason"`
	// Approval is the approver's signed statement of this resolution,
	// which the gate requires of every approver with a key (ADR 0021).
	Approval *Approval `json:"approval,omitempty"`
}

// ModeControl is an operator's command setting a workspace's permission
// mode, published (as a NATS request) on ControlSubject. An empty Mode
// clears the override, so the policy's own mode applies again.
type ModeControl struct {
	Mode   string `json:"mode"`
	Reason string `json:"reason"`
	// ExpiresAt, when set, ends the override; the policy's mode applies
	// again after it.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// decodeCommand decodes a command body strictly: one JSON object, no
// unknown fields, nothing after it, within MaxCommandBytes.
func decodeCommand(body []byte, v any, code Code) error {
	if len(body) > MaxCommandBytes {
		return Errorf(code, "body is %d bytes, limit %d", len(body), MaxCommandBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(code, "body: %v", err)
	}
	if dec.More() {
		return Errorf(code, "body: data after the JSON object")
	}
	return nil
}

func checkReason(reason string, code Code) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return Errorf(code, "a reason is required")
	case len(reason) > MaxReasonBytes:
		return Errorf(code, "reason is %d bytes, limit %d", len(reason), MaxReasonBytes)
	}
	return nil
}

// ParseResolution decodes and checks a resolution; its error is an *Error
// with code INVALID_RESOLUTION.
func ParseResolution(body []byte) (*Resolution, error) {
	var r Resolution
	if err := decodeCommand(body, &r, CodeInvalidResolution); err != nil {
		return nil, err
	}
	if _, ok := OpOfHold(r.HoldID); !ok {
		return nil, Errorf(CodeInvalidResolution, "hold_id %q is not of the form hold_<32 hex>", r.HoldID)
	}
	if !digestPattern(r.ArgsDigest) {
		return nil, Errorf(CodeInvalidResolution, "args_digest %q is not of the form sha256:<64 hex>", r.ArgsDigest)
	}
	if r.Decision != DecisionGrant && r.Decision != DecisionDeny {
		return nil, Errorf(CodeInvalidResolution, "decision %q is neither grant nor deny", r.Decision)
	}
	if err := checkReason(r.Reason, CodeInvalidResolution); err != nil {
		return nil, err
	}
	return &r, nil
}

// ParseModeControl decodes and checks a mode control; validMode says which
// modes exist. Its error is an *Error with code INVALID_CONTROL.
func ParseModeControl(body []byte, validMode func(string) bool, now time.Time) (*ModeControl, error) {
	var c ModeControl
	if err := decodeCommand(body, &c, CodeInvalidControl); err != nil {
		return nil, err
	}
	if c.Mode != "" && !validMode(c.Mode) {
		return nil, Errorf(CodeInvalidControl, "mode %q is not auto, confirm or locked", c.Mode)
	}
	if c.ExpiresAt != nil && !c.ExpiresAt.After(now) {
		return nil, Errorf(CodeInvalidControl, "expires_at %s is not in the future", c.ExpiresAt.Format(time.RFC3339))
	}
	if err := checkReason(c.Reason, CodeInvalidControl); err != nil {
		return nil, err
	}
	return &c, nil
}

func digestPattern(s string) bool {
	hex, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for _, c := range hex {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ModeSet records an operator's control of a workspace's mode, on
// ModeSubject. The newest one per workspace is in force until it expires.
type ModeSet struct {
	Workspace string `json:"workspace"`
	// Mode is the mode in force; empty when the override was cleared.
	Mode      string     `json:"mode"`
	Actor     string     `json:"actor"`
	ActorKey  string     `json:"actor_key,omitempty"`
	Reason    string     `json:"reason"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// InForce is the mode the control imposes at now, or "" when it imposes
// none (cleared or expired).
func (m *ModeSet) InForce(now time.Time) string {
	if m == nil || (m.ExpiresAt != nil && !now.Before(*m.ExpiresAt)) {
		return ""
	}
	return m.Mode
}

// PolicyLoaded records the policy a gate decides with, on PolicySubject,
// each time it changes (at start and on reload).
type PolicyLoaded struct {
	Hash         string   `json:"hash"`
	PreviousHash string   `json:"previous_hash,omitempty"`
	Source       string   `json:"source"`
	Warnings     []string `json:"warnings,omitempty"`
}
