// Package policy decides whether a request runs now or never: a capability
// class per tool and a permission mode per workspace. The decision names the
// policy it came from by hash.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	"github.com/airlock-dev/airlock/events"
)

// Class is a tool's capability class.
type Class string

// Capability classes, least to most dangerous.
const (
	ClassRead        Class = "read"
	ClassWrite       Class = "write"
	ClassExec        Class = "exec"
	ClassNetwork     Class = "network"
	ClassDestructive Class = "destructive"
)

// ParseClass returns the class named s; anything unknown is destructive.
func ParseClass(s string) Class {
	switch c := Class(s); c {
	case ClassRead, ClassWrite, ClassExec, ClassNetwork, ClassDestructive:
		return c
	}
	return ClassDestructive
}

// Mode is a workspace's permission mode.
type Mode string

// Permission modes.
const (
	// ModeAuto runs every class but destructive at once.
	ModeAuto Mode = "auto"
	// ModeLocked runs only read tools.
	ModeLocked Mode = "locked"
)

// ParseMode returns the mode named s; anything that does not parse is
// locked, so a corrupt mode fails closed.
func ParseMode(s string) Mode {
	if m := Mode(s); m == ModeAuto || m == ModeLocked {
		return m
	}
	return ModeLocked
}

// Policy is immutable once built; it is safe for concurrent use.
type Policy struct {
	tools       map[string]Class
	defaultMode Mode
	workspaces  map[string]Mode
	hash        string
}

// Spec is the serialisable form of a policy.
type Spec struct {
	// Tools maps a tool name to its class; unknown tools are destructive.
	Tools map[string]string `json:"tools"`
	// DefaultMode applies to workspaces not listed; empty means auto.
	DefaultMode string `json:"default_mode,omitempty"`
	// Workspaces maps a workspace to its mode.
	Workspaces map[string]string `json:"workspaces,omitempty"`
}

// New builds a policy from spec. Modes and classes that do not parse fail
// closed (locked, destructive).
func New(spec Spec) *Policy {
	p := &Policy{tools: map[string]Class{}, workspaces: map[string]Mode{}, defaultMode: ModeAuto}
	for t, c := range spec.Tools {
		p.tools[t] = ParseClass(c)
	}
	if spec.DefaultMode != "" {
		p.defaultMode = ParseMode(spec.DefaultMode)
	}
	for ws, m := range spec.Workspaces {
		p.workspaces[ws] = ParseMode(m)
	}
	p.hash = p.computeHash()
	return p
}

// computeHash is the SHA-256 of the canonical JSON of the parsed policy, so
// two specs that mean the same thing share a hash.
func (p *Policy) computeHash() string {
	norm := struct {
		Tools       map[string]Class `json:"tools"`
		DefaultMode Mode             `json:"default_mode"`
		Workspaces  map[string]Mode  `json:"workspaces"`
	}{p.tools, p.defaultMode, p.workspaces}
	raw, _ := json.Marshal(norm)
	canon, err := events.Canonical(raw)
	if err != nil {
		canon = raw
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Hash names the policy on every decision.
func (p *Policy) Hash() string { return p.hash }

// Class returns the class of a tool.
func (p *Policy) Class(tool string) Class {
	if c, ok := p.tools[tool]; ok {
		return c
	}
	return ClassDestructive
}

// Mode returns the mode of a workspace.
func (p *Policy) Mode(ws string) Mode {
	if m, ok := p.workspaces[ws]; ok {
		return m
	}
	return p.defaultMode
}

// Tools lists the tools the policy names, sorted.
func (p *Policy) Tools() []string {
	out := make([]string, 0, len(p.tools))
	for t := range p.tools {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Outcome is what a decision says.
type Outcome string

// Decision outcomes. Hold arrives with approvals.
const (
	Allow Outcome = "allow"
	Deny  Outcome = "deny"
)

// Decision is the verdict on one request.
type Decision struct {
	Outcome Outcome
	Class   Class
	Code    events.Code // set when denied
	Reason  string
	Hash    string
}

// Decide rules on a validated request.
func (p *Policy) Decide(r *events.Request) Decision {
	class := p.Class(r.Tool)
	d := Decision{Class: class, Hash: p.hash}
	switch mode := p.Mode(r.Workspace); {
	case mode == ModeLocked && class != ClassRead:
		d.Outcome, d.Code = Deny, events.CodeWorkspaceLocked
		d.Reason = "workspace " + r.Workspace + " is locked: only read tools run"
	case class == ClassDestructive:
		d.Outcome, d.Code = Deny, events.CodeCapabilityDenied
		d.Reason = "tool " + r.Tool + " is destructive (or unknown to the policy) and does not run in mode " + string(mode)
	default:
		d.Outcome = Allow
		d.Reason = string(class) + " tool allowed in mode " + string(mode)
	}
	return d
}
