package policy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
)

func TestDecideModesAndClasses(t *testing.T) {
	p := policy.MustNew(policy.Spec{
		Tools:       map[string]string{"ls": "read", "edit": "write", "sh": "exec", "curl": "network", "rm": "destructive", "odd": "sideways"},
		DefaultMode: "auto",
		Workspaces: map[string]policy.WorkspaceSpec{
			"vault":  {Mode: "locked", Agents: map[string]string{"admin": "auto"}},
			"review": {Mode: "confirm", Agents: map[string]string{"lead": "auto", "ghost": "locked"}},
			"dev":    {Mode: "auto", Agents: map[string]string{"intern": "confirm"}},
			"broken": {Mode: "auto-ish"},
		},
	})
	cases := []struct {
		ws, agent, tool string
		override        policy.Mode
		outcome         policy.Outcome
		code            events.Code
		class           policy.Class
		mode            policy.Mode
	}{
		// auto: everything but destructive runs.
		{"dev", "bot", "ls", "", policy.Allow, "", policy.ClassRead, policy.ModeAuto},
		{"dev", "bot", "edit", "", policy.Allow, "", policy.ClassWrite, policy.ModeAuto},
		{"dev", "bot", "sh", "", policy.Allow, "", policy.ClassExec, policy.ModeAuto},
		{"dev", "bot", "curl", "", policy.Allow, "", policy.ClassNetwork, policy.ModeAuto},
		{"dev", "bot", "rm", "", policy.Deny, events.CodeCapabilityDenied, policy.ClassDestructive, policy.ModeAuto},
		{"dev", "bot", "odd", "", policy.Deny, events.CodeCapabilityDenied, policy.ClassDestructive, policy.ModeAuto},
		{"dev", "bot", "unheard", "", policy.Deny, events.CodeCapabilityDenied, policy.ClassDestructive, policy.ModeAuto},
		{"elsewhere", "bot", "edit", "", policy.Allow, "", policy.ClassWrite, policy.ModeAuto},
		// confirm: read runs, the rest is held, destructive denied.
		{"review", "bot", "ls", "", policy.Allow, "", policy.ClassRead, policy.ModeConfirm},
		{"review", "bot", "edit", "", policy.Hold, events.CodeApprovalRequired, policy.ClassWrite, policy.ModeConfirm},
		{"review", "bot", "sh", "", policy.Hold, events.CodeApprovalRequired, policy.ClassExec, policy.ModeConfirm},
		{"review", "bot", "curl", "", policy.Hold, events.CodeApprovalRequired, policy.ClassNetwork, policy.ModeConfirm},
		{"review", "bot", "rm", "", policy.Deny, events.CodeCapabilityDenied, policy.ClassDestructive, policy.ModeConfirm},
		// locked: only read runs.
		{"vault", "bot", "ls", "", policy.Allow, "", policy.ClassRead, policy.ModeLocked},
		{"vault", "bot", "edit", "", policy.Deny, events.CodeWorkspaceLocked, policy.ClassWrite, policy.ModeLocked},
		{"vault", "bot", "rm", "", policy.Deny, events.CodeWorkspaceLocked, policy.ClassDestructive, policy.ModeLocked},
		// Per agent.
		{"vault", "admin", "edit", "", policy.Allow, "", policy.ClassWrite, policy.ModeAuto},
		{"review", "lead", "sh", "", policy.Allow, "", policy.ClassExec, policy.ModeAuto},
		{"review", "ghost", "sh", "", policy.Deny, events.CodeWorkspaceLocked, policy.ClassExec, policy.ModeLocked},
		{"dev", "intern", "sh", "", policy.Hold, events.CodeApprovalRequired, policy.ClassExec, policy.ModeConfirm},
		// A corrupt mode is locked.
		{"broken", "bot", "edit", "", policy.Deny, events.CodeWorkspaceLocked, policy.ClassWrite, policy.ModeLocked},
		{"broken", "bot", "ls", "", policy.Allow, "", policy.ClassRead, policy.ModeLocked},
		// An override beats the workspace and agent modes.
		{"dev", "bot", "edit", policy.ModeLocked, policy.Deny, events.CodeWorkspaceLocked, policy.ClassWrite, policy.ModeLocked},
		{"dev", "bot", "edit", policy.ModeConfirm, policy.Hold, events.CodeApprovalRequired, policy.ClassWrite, policy.ModeConfirm},
		{"vault", "bot", "edit", policy.ModeAuto, policy.Allow, "", policy.ClassWrite, policy.ModeAuto},
		{"review", "lead", "sh", policy.ModeLocked, policy.Deny, events.CodeWorkspaceLocked, policy.ClassExec, policy.ModeLocked},
		{"dev", "intern", "sh", policy.ModeAuto, policy.Allow, "", policy.ClassExec, policy.ModeAuto},
		{"broken", "bot", "edit", policy.ModeAuto, policy.Allow, "", policy.ClassWrite, policy.ModeAuto},
		// An override that is not a mode is locked.
		{"dev", "bot", "edit", policy.Mode("bogus"), policy.Deny, events.CodeWorkspaceLocked, policy.ClassWrite, policy.ModeLocked},
		// No override makes destructive run.
		{"dev", "bot", "rm", policy.ModeAuto, policy.Deny, events.CodeCapabilityDenied, policy.ClassDestructive, policy.ModeAuto},
	}
	for _, tc := range cases {
		t.Run(tc.ws+"/"+tc.agent+"/"+tc.tool+"/"+string(tc.override), func(t *testing.T) {
			d := p.Decide(req(tc.ws, tc.agent, tc.tool, `{}`), tc.override)
			assert.Equal(t, tc.outcome, d.Outcome)
			assert.Equal(t, tc.code, d.Code)
			assert.Equal(t, tc.class, d.Class)
			assert.Equal(t, tc.mode, d.Mode)
			assert.Equal(t, "", d.Rule)
			assert.Equal(t, p.Hash(), d.Hash)
			assert.NotEmpty(t, d.Reason)
		})
	}
}

func TestLockedBeatsAllowRule(t *testing.T) {
	p := policy.MustNew(policy.Spec{
		Tools:      map[string]string{"edit": "write", "ls": "read"},
		Workspaces: map[string]policy.WorkspaceSpec{"vault": {Mode: "locked"}},
		Rules:      []policy.RuleSpec{{Name: "allow-all", When: "true", Action: "allow"}},
	})
	d := p.Decide(req("vault", "bot", "edit", `{}`), "")
	assert.Equal(t, policy.Deny, d.Outcome)
	assert.Equal(t, events.CodeWorkspaceLocked, d.Code)
	assert.Equal(t, "", d.Rule)
	assert.Contains(t, d.Reason, "locked")

	d = p.Decide(req("dev", "bot", "edit", `{}`), policy.ModeLocked)
	assert.Equal(t, events.CodeWorkspaceLocked, d.Code, "an operator's lockdown beats the rule too")

	d = p.Decide(req("vault", "bot", "ls", `{}`), "")
	assert.Equal(t, policy.Allow, d.Outcome, "read tools still reach the rules in a locked workspace")
	assert.Equal(t, "allow-all", d.Rule)
}

func TestConfirmWithAllowRuleRunsAtOnce(t *testing.T) {
	p := policy.MustNew(policy.Spec{
		Tools:       map[string]string{"edit": "write", "sh": "exec"},
		DefaultMode: "confirm",
		Rules: []policy.RuleSpec{
			{Name: "allow-small-edits", When: `tool == "edit" && mode == "confirm" && args.lines < 10`, Action: "allow", Reason: "small edits run"},
		},
	})
	d := p.Decide(req("dev", "bot", "edit", `{"lines":3}`), "")
	assert.Equal(t, policy.Allow, d.Outcome)
	assert.Equal(t, events.Code(""), d.Code)
	assert.Equal(t, "allow-small-edits", d.Rule)
	assert.Equal(t, "small edits run", d.Reason)
	assert.Equal(t, policy.ModeConfirm, d.Mode)

	d = p.Decide(req("dev", "bot", "edit", `{"lines":30}`), "")
	assert.Equal(t, policy.Hold, d.Outcome)
	assert.Equal(t, events.CodeApprovalRequired, d.Code)
	assert.Equal(t, "", d.Rule)

	d = p.Decide(req("dev", "bot", "edit", `{"lines":3}`), policy.ModeAuto)
	assert.Equal(t, policy.Allow, d.Outcome)
	assert.Equal(t, "", d.Rule, "the rule sees the effective mode, auto, and does not match")
}

func TestRulesSeeEveryVariable(t *testing.T) {
	p := policy.MustNew(policy.Spec{
		Tools:      map[string]string{"sh": "exec"},
		Workspaces: map[string]policy.WorkspaceSpec{"dev": {Mode: "confirm"}},
		Rules: []policy.RuleSpec{{
			Name: "all-vars",
			When: `tool == "sh" && class == "exec" && workspace == "dev" && agent == "bot" && mode == "confirm" &&
				args.s == "x" && args.n == 2 && args.f == 1.5 && args.b == true && args.z == null &&
				args.l == [1, "a"] && args.m.k == "v"`,
			Action: "deny",
		}},
	})
	d := p.Decide(req("dev", "bot", "sh", `{"s":"x","n":2,"f":1.5,"b":true,"z":null,"l":[1,"a"],"m":{"k":"v"}}`), "")
	assert.Equal(t, policy.Deny, d.Outcome)
	assert.Equal(t, "all-vars", d.Rule)

	d = p.Decide(req("dev", "other", "sh", `{"s":"x","n":2,"f":1.5,"b":true,"z":null,"l":[1,"a"],"m":{"k":"v"}}`), "")
	assert.Equal(t, policy.Hold, d.Outcome)
	assert.Equal(t, "", d.Rule)
}

func TestDecideNilRequest(t *testing.T) {
	p := policy.Default()
	d := p.Decide(nil, "")
	assert.Equal(t, policy.Deny, d.Outcome)
	assert.Equal(t, events.CodeInvalidEvent, d.Code)
	assert.NotEmpty(t, d.Reason)
	assert.Equal(t, p.Hash(), d.Hash)
}

func TestDefault(t *testing.T) {
	p := policy.Default()
	assert.Same(t, p, policy.Default(), "built once")
	assert.Empty(t, p.Warnings())
	assert.Equal(t, []string{"apply_patch", "echo", "exec", "remote"}, p.Tools())
	assert.Equal(t, policy.DefaultHoldTTL, p.HoldTTL())
	assert.Equal(t, policy.ModeAuto, p.Mode("any", "one"))
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, p.Hash())
	assert.Equal(t, p.Hash(), policy.MustNew(p.Spec()).Hash())

	cases := []struct {
		name, tool, args string
		outcome          policy.Outcome
		code             events.Code
		rule             string
	}{
		{"echo runs", "echo", `{"text":"hi"}`, policy.Allow, "", ""},
		{"patches run", "apply_patch", `{"patch":"..."}`, policy.Allow, "", ""},
		{"remote runs", "remote", `{"host":"example.com"}`, policy.Allow, "", ""},
		{"exec runs", "exec", `{"argv":["ls","-l"]}`, policy.Allow, "", ""},
		{"exec without argv runs", "exec", `{}`, policy.Allow, "", ""},
		{"exec with odd args runs", "exec", `{"argv":"rm"}`, policy.Allow, "", ""},
		{"exec with list args runs", "exec", `[1,2]`, policy.Allow, "", ""},
		{"rmdir is not rm", "exec", `{"argv":["rmdir","x"]}`, policy.Allow, "", ""},
		{"rm is held", "exec", `{"argv":["rm","-rf","build"]}`, policy.Hold, events.CodeApprovalRequired, "hold-exec-rm"},
		{"/bin/rm is held", "exec", `{"argv":["/bin/rm","x"]}`, policy.Hold, events.CodeApprovalRequired, "hold-exec-rm"},
		{"rm in a shell line is held", "exec", `{"argv":["sh","-c","cd x && rm -rf y"]}`, policy.Hold, events.CodeApprovalRequired, "hold-exec-rm"},
		{"rm mixed with numbers is held", "exec", `{"argv":[1,"rm"]}`, policy.Hold, events.CodeApprovalRequired, "hold-exec-rm"},
		{"unknown tools are denied", "format_disk", `{}`, policy.Deny, events.CodeCapabilityDenied, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(req("dev", "bot", tc.tool, tc.args), "")
			assert.Equal(t, tc.outcome, d.Outcome, d.Reason)
			assert.Equal(t, tc.code, d.Code)
			assert.Equal(t, tc.rule, d.Rule)
			assert.NotContains(t, d.Reason, "failed to evaluate", "the default rule evaluates without error")
			assert.NotEmpty(t, d.Reason)
		})
	}
}
