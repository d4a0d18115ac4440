package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/events"
)

// Class is a tool's capability class, events.Class: the public type an
// executor declares, so that an executor outside this module needs no
// internal package.
type Class = events.Class

// Capability classes, least to most dangerous.
const (
	ClassRead        = events.ClassRead
	ClassWrite       = events.ClassWrite
	ClassExec        = events.ClassExec
	ClassNetwork     = events.ClassNetwork
	ClassDestructive = events.ClassDestructive
)

// ParseClass returns the class named s; anything unknown is destructive.
func ParseClass(s string) Class { return events.ParseClass(s) }

func validClass(s string) bool { return ParseClass(s) == Class(s) }

// Mode is a permission mode.
type Mode string

// Permission modes.
const (
	// ModeAuto runs every class but destructive at once.
	ModeAuto Mode = "auto"
	// ModeConfirm runs read tools at once and holds every other class for
	// an approver (destructive stays denied unless a rule says otherwise).
	ModeConfirm Mode = "confirm"
	// ModeLocked runs only read tools; no rule overrides it.
	ModeLocked Mode = "locked"
)

// ParseMode returns the mode named s; anything that does not parse is
// locked, so a corrupt mode fails closed.
func ParseMode(s string) Mode {
	if m := Mode(s); ValidMode(s) {
		return m
	}
	return ModeLocked
}

// ValidMode reports whether s names a mode.
func ValidMode(s string) bool {
	switch Mode(s) {
	case ModeAuto, ModeConfirm, ModeLocked:
		return true
	}
	return false
}

// Spec is the serialisable form of a policy: the shape of a policy file.
type Spec struct {
	// Tools maps a tool name to its class; unknown tools are destructive.
	Tools map[string]string `json:"tools,omitempty" yaml:"tools"`
	// DefaultMode applies to workspaces not listed; empty means auto.
	DefaultMode string `json:"default_mode,omitempty" yaml:"default_mode"`
	// Workspaces configures workspaces by name.
	Workspaces map[string]WorkspaceSpec `json:"workspaces,omitempty" yaml:"workspaces"`
	// Rules are evaluated in order; the first that matches decides.
	Rules []RuleSpec `json:"rules,omitempty" yaml:"rules"`
	// HoldTTL is how long a hold waits (Go duration); empty for
	// DefaultHoldTTL.
	HoldTTL string `json:"hold_ttl,omitempty" yaml:"hold_ttl"`
	// Results is how long results are kept for the agents that asked, in
	// every workspace that sets none; nil for serve's --result-ttl.
	Results *ResultsSpec `json:"results,omitempty" yaml:"results"`
}

// ResultsSpec is how long a completed op's result is kept, sealed, for
// the agent that asked (ADR 0018).
type ResultsSpec struct {
	// TTL is a Go duration from 1s to 720h, or "0" to keep none.
	TTL string `json:"ttl,omitempty" yaml:"ttl"`
	// EraseAfterDelivery erases a result as soon as the agent has it.
	EraseAfterDelivery bool `json:"erase_after_delivery,omitempty" yaml:"erase_after_delivery"`
}

// WorkspaceSpec configures one workspace.
type WorkspaceSpec struct {
	// Mode is the workspace's permission mode; empty for the default mode.
	Mode string `json:"mode,omitempty" yaml:"mode"`
	// Root is the directory tools of the workspace work under.
	Root string `json:"root,omitempty" yaml:"root"`
	// Agents overrides the mode for named agents.
	Agents map[string]string `json:"agents,omitempty" yaml:"agents"`
	// Results overrides the policy's results for this workspace.
	Results *ResultsSpec `json:"results,omitempty" yaml:"results"`
	// Notify says where the workspace's holds are announced; nil for
	// nowhere.
	Notify *NotifySpec `json:"notify,omitempty" yaml:"notify"`
}

// NotifySpec says where a workspace's holds are announced.
type NotifySpec struct {
	// Webhook is an absolute http or https URL, without user info, of at
	// most MaxWebhookBytes, to which each hold of the workspace is
	// POSTed as JSON; empty for none. It is often a credential (a chat
	// tool's incoming webhook): Airlock never logs it.
	Webhook string `json:"webhook,omitempty" yaml:"webhook"`
}

// RuleSpec is one rule: when its CEL expression is true, its action
// decides.
type RuleSpec struct {
	Name   string `json:"name" yaml:"name"`
	When   string `json:"when" yaml:"when"`
	Action string `json:"action" yaml:"action"`
	Reason string `json:"reason,omitempty" yaml:"reason"`
}

func (s Spec) clone() Spec {
	c := s
	c.Tools = maps.Clone(s.Tools)
	c.Rules = slices.Clone(s.Rules)
	if s.Results != nil {
		r := *s.Results
		c.Results = &r
	}
	if s.Workspaces != nil {
		c.Workspaces = make(map[string]WorkspaceSpec, len(s.Workspaces))
		for n, w := range s.Workspaces {
			w.Agents = maps.Clone(w.Agents)
			if w.Results != nil {
				r := *w.Results
				w.Results = &r
			}
			if w.Notify != nil {
				ns := *w.Notify
				w.Notify = &ns
			}
			c.Workspaces[n] = w
		}
	}
	return c
}

type workspace struct {
	mode    Mode
	root    string
	agents  map[string]Mode
	results *events.Retention
	webhook string
}

// Policy is immutable once built; it is safe for concurrent use.
type Policy struct {
	spec        Spec
	tools       map[string]Class
	defaultMode Mode
	workspaces  map[string]workspace
	rules       []rule
	holdTTL     time.Duration
	results     *events.Retention
	hash        string
	warnings    []string
}

// New builds a policy from spec, which it copies. Modes and classes that
// do not parse fail closed (locked, destructive) and add a warning; an
// invalid name, a hold_ttl out of range, a rule that breaks a limit or does
// not compile is an error.
func New(spec Spec) (*Policy, error) {
	p, err := build(spec)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return p, nil
}

// MustNew is New for specs known to be valid; it panics otherwise.
func MustNew(spec Spec) *Policy {
	p, err := New(spec)
	if err != nil {
		panic(err)
	}
	return p
}

const namePatternText = "[a-z0-9][a-z0-9_-]{0,63}"

// build is New without the "policy: " prefix on errors.
func build(spec Spec) (*Policy, error) {
	spec = spec.clone()
	p := &Policy{
		spec:        spec,
		tools:       make(map[string]Class, len(spec.Tools)),
		workspaces:  make(map[string]workspace, len(spec.Workspaces)),
		defaultMode: ModeAuto,
		holdTTL:     DefaultHoldTTL,
	}
	for _, t := range slices.Sorted(maps.Keys(spec.Tools)) {
		if !events.ValidName(t) {
			return nil, fmt.Errorf("tools: tool name %q must match %s", truncate(t, 80), namePatternText)
		}
		c := spec.Tools[t]
		if !validClass(c) {
			p.warnf("tools.%s: class %q is not read, write, exec, network or destructive; the tool is treated as destructive", t, truncate(c, 80))
		}
		p.tools[t] = ParseClass(c)
	}
	if spec.DefaultMode != "" {
		p.defaultMode = p.parseMode("default_mode", spec.DefaultMode)
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Workspaces)) {
		w := spec.Workspaces[name]
		if !events.ValidName(name) {
			return nil, fmt.Errorf("workspaces: workspace name %q must match %s", truncate(name, 80), namePatternText)
		}
		if len(w.Root) > MaxRootBytes {
			return nil, fmt.Errorf("workspaces.%s.root is %d bytes, limit %d", name, len(w.Root), MaxRootBytes)
		}
		if strings.IndexByte(w.Root, 0) >= 0 || !utf8.ValidString(w.Root) {
			return nil, fmt.Errorf("workspaces.%s.root must be UTF-8 text without NUL bytes", name)
		}
		ws := workspace{mode: p.defaultMode, root: w.Root, agents: make(map[string]Mode, len(w.Agents))}
		if w.Mode != "" {
			ws.mode = p.parseMode("workspaces."+name+".mode", w.Mode)
		}
		for _, a := range slices.Sorted(maps.Keys(w.Agents)) {
			if !events.ValidName(a) {
				return nil, fmt.Errorf("workspaces.%s.agents: agent name %q must match %s", name, truncate(a, 80), namePatternText)
			}
			ws.agents[a] = p.parseMode("workspaces."+name+".agents."+a, w.Agents[a])
		}
		if w.Results != nil {
			r, err := retention("workspaces."+name+".results", *w.Results)
			if err != nil {
				return nil, err
			}
			ws.results = &r
		}
		if w.Notify != nil {
			if err := checkWebhook(w.Notify.Webhook); err != nil {
				return nil, fmt.Errorf("workspaces.%s.notify.webhook %w", name, err)
			}
			ws.webhook = w.Notify.Webhook
		}
		p.workspaces[name] = ws
	}
	if spec.HoldTTL != "" {
		d, err := time.ParseDuration(spec.HoldTTL)
		if err != nil || d < MinHoldTTL || d > MaxHoldTTL {
			return nil, fmt.Errorf("hold_ttl %q: want a duration from %s to %s, such as 15m", truncate(spec.HoldTTL, 80), MinHoldTTL, MaxHoldTTL)
		}
		p.holdTTL = d
	}
	if spec.Results != nil {
		r, err := retention("results", *spec.Results)
		if err != nil {
			return nil, err
		}
		p.results = &r
	}
	rules, err := compileRules(spec.Rules)
	if err != nil {
		return nil, err
	}
	p.rules = rules
	if p.hash, err = p.computeHash(); err != nil {
		return nil, err
	}
	return p, nil
}

// retention checks a results spec at path.
func retention(path string, r ResultsSpec) (events.Retention, error) {
	if r.TTL == "" {
		// serve's --result-ttl, with this spec's erase_after_delivery.
		return events.Retention{TTLSeconds: DefaultTTL, EraseOnDelivery: r.EraseAfterDelivery}, nil
	}
	d, err := time.ParseDuration(r.TTL)
	if err != nil || events.ValidTTL(d) != nil {
		return events.Retention{}, fmt.Errorf("%s.ttl %q: want 0 (keep none) or whole seconds from 1s to %s, such as 24h", path, truncate(r.TTL, 80), events.MaxResultTTL)
	}
	return events.Retention{TTLSeconds: int64(d / time.Second), EraseOnDelivery: r.EraseAfterDelivery && d > 0}, nil
}

// DefaultTTL is the TTLSeconds of a Results whose spec names no ttl:
// the gate puts serve's --result-ttl in its place.
const DefaultTTL = -1

// Results is what the policy keeps of results in workspace ws, and false
// when it says nothing (serve's --result-ttl applies). A TTLSeconds of
// DefaultTTL stands for serve's --result-ttl too.
func (p *Policy) Results(ws string) (events.Retention, bool) {
	if w, ok := p.workspaces[ws]; ok && w.results != nil {
		return *w.results, true
	}
	if p.results != nil {
		return *p.results, true
	}
	return events.Retention{}, false
}

// parseMode parses a mode at path, warning when it does not parse.
func (p *Policy) parseMode(path, s string) Mode {
	if !ValidMode(s) {
		p.warnf("%s: mode %q is not auto, confirm or locked; it is treated as locked", path, truncate(s, 80))
	}
	return ParseMode(s)
}

func (p *Policy) warnf(format string, args ...any) {
	p.warnings = append(p.warnings, fmt.Sprintf(format, args...))
}

// Hash names the policy on every decision: "sha256:" and the hex SHA-256
// of the canonical JSON of the parsed policy.
func (p *Policy) Hash() string { return p.hash }

// HoldTTL is how long a hold waits for an approver.
func (p *Policy) HoldTTL() time.Duration { return p.holdTTL }

// Spec returns a deep copy of the spec the policy was built from; the
// caller owns it.
func (p *Policy) Spec() Spec { return p.spec.clone() }

// Warnings lists, one human-readable line each, the classes and modes that
// did not parse and were replaced by destructive and locked. The caller
// owns the slice; it is empty for a clean policy.
func (p *Policy) Warnings() []string { return slices.Clone(p.warnings) }

// Class returns the class of a tool.
func (p *Policy) Class(tool string) Class {
	if c, ok := p.tools[tool]; ok {
		return c
	}
	return ClassDestructive
}

// Mode returns the mode of an agent in a workspace.
func (p *Policy) Mode(ws, agent string) Mode {
	w, ok := p.workspaces[ws]
	if !ok {
		return p.defaultMode
	}
	if m, ok := w.agents[agent]; ok {
		return m
	}
	return w.mode
}

// Root returns the workspace's root directory, or "".
func (p *Policy) Root(ws string) string { return p.workspaces[ws].root }

// Tools lists the tools the policy names, sorted. The caller owns the
// slice.
func (p *Policy) Tools() []string { return slices.Sorted(maps.Keys(p.tools)) }
