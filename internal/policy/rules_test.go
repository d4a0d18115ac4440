package policy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
)

func rules(rs ...policy.RuleSpec) policy.Spec {
	return policy.Spec{
		Tools: map[string]string{"echo": "read", "exec": "exec", "apply_patch": "write", "remote": "network", "wipe": "destructive"},
		Rules: rs,
	}
}

func TestRuleCompileErrors(t *testing.T) {
	ok := policy.RuleSpec{Name: "ok", When: "true", Action: "allow"}
	cases := []struct {
		name string
		rs   []policy.RuleSpec
		want string
	}{
		{"undeclared variable names rule and position",
			[]policy.RuleSpec{ok, ok2("other"), {Name: "hold-rm", When: `tool == "exec" && argz.argv.size() > 0`, Action: "hold"}},
			`policy: rule "hold-rm" (rules[2]): 1:19: undeclared reference to 'argz'`},
		{"position on a later line",
			[]policy.RuleSpec{{Name: "multi", When: "tool == \"exec\" &&\n  nope", Action: "deny"}},
			`policy: rule "multi" (rules[0]): 2:3: undeclared reference to 'nope'`},
		{"syntax error", []policy.RuleSpec{{Name: "broken", When: "tool ==", Action: "deny"}}, `policy: rule "broken" (rules[0]): 1:8: Syntax error`},
		{"type error", []policy.RuleSpec{{Name: "typed", When: "tool == 1", Action: "deny"}}, `policy: rule "typed" (rules[0]): 1:6: found no matching overload for '_==_' applied to '(string, int)'`},
		{"string result", []policy.RuleSpec{{Name: "str", When: "tool", Action: "deny"}}, `policy: rule "str" (rules[0]): when must be a bool expression, not string`},
		{"dyn result", []policy.RuleSpec{{Name: "dyn", When: "args.dry_run", Action: "allow"}}, `policy: rule "dyn" (rules[0]): when must be a bool expression, not dyn`},
		{"int result", []policy.RuleSpec{{Name: "num", When: "1 + 1", Action: "allow"}}, `when must be a bool expression, not int`},
		{"duplicate name", []policy.RuleSpec{ok, ok2("x"), ok}, `policy: rule "ok" (rules[2]): name already used by rules[0]`},
		{"action upper case", []policy.RuleSpec{{Name: "r", When: "true", Action: "Deny"}}, `policy: rule "r" (rules[0]): action "Deny" must be allow, deny or hold`},
		{"action empty", []policy.RuleSpec{{Name: "r", When: "true"}}, `action "" must be allow, deny or hold`},
		{"action unknown", []policy.RuleSpec{{Name: "r", When: "true", Action: "ask"}}, `action "ask"`},
		{"when empty", []policy.RuleSpec{{Name: "r", When: "  \n", Action: "deny"}}, `policy: rule "r" (rules[0]): when is empty`},
		{"name empty", []policy.RuleSpec{{Name: "", When: "true", Action: "deny"}}, `policy: rules[0]: name "" must match [a-z0-9][a-z0-9_-]{0,63}`},
		{"name upper case", []policy.RuleSpec{ok, {Name: "Hold", When: "true", Action: "deny"}}, `policy: rules[1]: name "Hold" must match`},
		{"name with space", []policy.RuleSpec{{Name: "a b", When: "true", Action: "deny"}}, `name "a b" must match`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.New(rules(tc.rs...))
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func ok2(name string) policy.RuleSpec {
	return policy.RuleSpec{Name: name, When: "false", Action: "deny"}
}

func TestRuleLimits(t *testing.T) {
	whenOf := func(n int) string {
		const pre, post = `tool == "`, `"`
		return pre + strings.Repeat("a", n-len(pre)-len(post)) + post
	}
	many := func(n int) []policy.RuleSpec {
		out := make([]policy.RuleSpec, n)
		for i := range out {
			out[i] = policy.RuleSpec{Name: fmt.Sprintf("r%d", i), When: fmt.Sprintf("tool == %q", fmt.Sprint("t", i)), Action: "deny"}
		}
		return out
	}
	name64 := strings.Repeat("n", policy.MaxRuleNameBytes)
	cases := []struct {
		name string
		rs   []policy.RuleSpec
		want string // "" for no error
	}{
		{"rules at limit", many(policy.MaxRules), ""},
		{"rules over limit", many(policy.MaxRules + 1), "policy: rules: 257 rules, limit 256"},
		{"when at limit", []policy.RuleSpec{{Name: "w", When: whenOf(policy.MaxRuleWhenBytes), Action: "deny"}}, ""},
		{"when over limit", []policy.RuleSpec{{Name: "w", When: whenOf(policy.MaxRuleWhenBytes + 1), Action: "deny"}}, `policy: rule "w" (rules[0]): when is 4097 bytes, limit 4096`},
		{"reason at limit", []policy.RuleSpec{{Name: "r", When: "true", Action: "deny", Reason: strings.Repeat("x", policy.MaxRuleReasonBytes)}}, ""},
		{"reason over limit", []policy.RuleSpec{{Name: "r", When: "true", Action: "deny", Reason: strings.Repeat("x", policy.MaxRuleReasonBytes+1)}}, `policy: rule "r" (rules[0]): reason is 1025 bytes, limit 1024`},
		{"name at limit", []policy.RuleSpec{{Name: name64, When: "true", Action: "deny"}}, ""},
		{"name over limit", []policy.RuleSpec{{Name: name64 + "n", When: "true", Action: "deny"}}, "policy: rules[0]: name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.New(rules(tc.rs...))
			if tc.want == "" {
				require.NoError(t, err)
				require.NotNil(t, p)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestRulePaths(t *testing.T) {
	p := policy.MustNew(rules(
		policy.RuleSpec{Name: "allow-trusted-wipe", When: `tool == "wipe" && agent == "janitor"`, Action: "allow", Reason: "the janitor may wipe"},
		policy.RuleSpec{Name: "deny-far-hosts", When: `tool == "remote" && !(args.host in ["api.example.com"])`, Action: "deny"},
		policy.RuleSpec{Name: "hold-rm", When: `tool == "exec" && "rm" in args.argv`, Action: "hold", Reason: "rm needs an approver"},
		policy.RuleSpec{Name: "hold-prod", When: `workspace == "prod" && class != "read"`, Action: "hold"},
		policy.RuleSpec{Name: "allow-big", When: `tool == "apply_patch" && args.lines > 1000.5 && mode == "auto"`, Action: "allow"},
		policy.RuleSpec{Name: "deny-big", When: `tool == "apply_patch" && args.lines > 1000`, Action: "deny", Reason: "patch too big"},
	))
	cases := []struct {
		name             string
		r                *events.Request
		outcome          policy.Outcome
		code             events.Code
		rule, reasonPart string
	}{
		{"allow rule beats destructive", req("dev", "janitor", "wipe", `{}`), policy.Allow, "", "allow-trusted-wipe", "the janitor may wipe"},
		{"destructive without rule", req("dev", "bot", "wipe", `{}`), policy.Deny, events.CodeCapabilityDenied, "", "destructive"},
		{"deny rule", req("dev", "bot", "remote", `{"host":"evil.example.net"}`), policy.Deny, events.CodePolicyDenied, "deny-far-hosts", `rule "deny-far-hosts" denies it`},
		{"deny rule does not match", req("dev", "bot", "remote", `{"host":"api.example.com"}`), policy.Allow, "", "", "network tool remote allowed in mode auto"},
		{"hold rule", req("dev", "bot", "exec", `{"argv":["rm","-rf","/"]}`), policy.Hold, events.CodeApprovalRequired, "hold-rm", "rm needs an approver"},
		{"hold rule does not match", req("dev", "bot", "exec", `{"argv":["ls"]}`), policy.Allow, "", "", "allowed"},
		{"rule on workspace and class", req("prod", "bot", "apply_patch", `{"lines":3}`), policy.Hold, events.CodeApprovalRequired, "hold-prod", `rule "hold-prod" holds it for an approver`},
		{"read passes the class rule", req("prod", "bot", "echo", `{}`), policy.Allow, "", "", "read tool echo allowed"},
		{"first match wins", req("dev", "bot", "apply_patch", `{"lines":5000}`), policy.Allow, "", "allow-big", `rule "allow-big" allows it`},
		{"number compares with int", req("dev", "bot", "apply_patch", `{"lines":1000.25}`), policy.Deny, events.CodePolicyDenied, "deny-big", "patch too big"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.r, "")
			assert.Equal(t, tc.outcome, d.Outcome)
			assert.Equal(t, tc.code, d.Code)
			assert.Equal(t, tc.rule, d.Rule)
			assert.Contains(t, d.Reason, tc.reasonPart)
			assert.Equal(t, p.Hash(), d.Hash)
			assert.Equal(t, p.Class(tc.r.Tool), d.Class)
			assert.Equal(t, policy.ModeAuto, d.Mode)
		})
	}
}

func TestRuleRuntimeErrorsFailClosed(t *testing.T) {
	cases := []struct {
		name    string
		action  string
		outcome policy.Outcome
		code    events.Code
		rule    string
	}{
		{"deny rule that errors matches", "deny", policy.Deny, events.CodePolicyDenied, "broken"},
		{"hold rule that errors matches", "hold", policy.Hold, events.CodeApprovalRequired, "broken"},
		{"allow rule that errors does not match", "allow", policy.Allow, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := policy.MustNew(rules(policy.RuleSpec{Name: "broken", When: `args.missing == "x"`, Action: tc.action, Reason: "the reason"}))
			d := p.Decide(req("dev", "bot", "exec", `{"argv":["ls"]}`), "")
			assert.Equal(t, tc.outcome, d.Outcome)
			assert.Equal(t, tc.code, d.Code)
			assert.Equal(t, tc.rule, d.Rule)
			if tc.rule != "" {
				assert.Contains(t, d.Reason, `rule "broken" failed to evaluate (no such key: missing); failing closed: the reason`)
			} else {
				assert.Equal(t, "exec tool exec allowed in mode auto", d.Reason)
			}
		})
	}

	// An erroring allow rule falls through to the next rule.
	p := policy.MustNew(rules(
		policy.RuleSpec{Name: "allow-if", When: `args.trusted == true`, Action: "allow"},
		policy.RuleSpec{Name: "hold-exec", When: `tool == "exec"`, Action: "hold"},
	))
	d := p.Decide(req("dev", "bot", "exec", `{}`), "")
	assert.Equal(t, policy.Hold, d.Outcome)
	assert.Equal(t, "hold-exec", d.Rule)
	d = p.Decide(req("dev", "bot", "exec", `{"trusted":true}`), "")
	assert.Equal(t, policy.Allow, d.Outcome)
	assert.Equal(t, "allow-if", d.Rule)

	// Args that are not JSON make every rule that reads them error: the
	// allow rule does not match, a deny rule does.
	bad := policy.MustNew(rules(
		policy.RuleSpec{Name: "allow-if", When: `args.trusted == true`, Action: "allow"},
		policy.RuleSpec{Name: "deny-if", When: `tool == "exec" && args.evil == true`, Action: "deny"},
	))
	d = bad.Decide(req("dev", "bot", "exec", `{"trusted":`), "")
	assert.Equal(t, policy.Deny, d.Outcome)
	assert.Equal(t, "deny-if", d.Rule)
	assert.Contains(t, d.Reason, `rule "deny-if" failed to evaluate (args are not JSON`)
	// A rule that never reads them is not affected.
	d = bad.Decide(req("dev", "bot", "echo", `{"trusted":`), "")
	assert.Equal(t, policy.Allow, d.Outcome)
	assert.Equal(t, "", d.Rule)

	// A type error at run time fails closed too.
	q := policy.MustNew(rules(policy.RuleSpec{Name: "deny-many", When: `args.count > 3`, Action: "deny"}))
	d = q.Decide(req("dev", "bot", "exec", `{"count":"lots"}`), "")
	assert.Equal(t, policy.Deny, d.Outcome)
	assert.Equal(t, "deny-many", d.Rule)
	assert.Contains(t, d.Reason, "failed to evaluate")
	d = q.Decide(req("dev", "bot", "exec", `{"count":2}`), "")
	assert.Equal(t, policy.Allow, d.Outcome)

	// What failed is named, never the values: the reason is stored in the
	// op's events.
	conv := policy.MustNew(rules(
		policy.RuleSpec{Name: "deny-big", When: `int(args.n) > 3`, Action: "deny"},
		policy.RuleSpec{Name: "deny-key", When: `args.m[args.k] == 1`, Action: "deny"},
	))
	for _, args := range []string{`{"n":"SECRET-1"}`, `{"n":"1","m":{},"k":"SECRET-2"}`} {
		d = conv.Decide(req("dev", "bot", "exec", args), "")
		assert.Equal(t, policy.Deny, d.Outcome, args)
		assert.Contains(t, d.Reason, "failed to evaluate", args)
		assert.NotContains(t, d.Reason, "SECRET", args)
	}
	d = q.Decide(req("dev", "bot", "exec", `{"count":2}`), "")
	assert.Equal(t, policy.Allow, d.Outcome)
}

func TestRuleCostLimit(t *testing.T) {
	// Each element costs a few units; a nested loop over n elements costs
	// about n² of them.
	p := policy.MustNew(rules(
		policy.RuleSpec{Name: "allow-quadratic", When: `args.l.all(x, args.l.all(y, x == y || x != y))`, Action: "allow"},
		policy.RuleSpec{Name: "deny-quadratic", When: `args.l.exists(x, args.l.exists(y, x == y && x < 0))`, Action: "deny"},
	))
	list := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprint(i)
		}
		return `{"l":[` + strings.Join(parts, ",") + `]}`
	}
	d := p.Decide(req("dev", "bot", "exec", list(10)), "")
	assert.Equal(t, policy.Allow, d.Outcome)
	assert.Equal(t, "allow-quadratic", d.Rule, "cheap enough: the allow rule matches")

	d = p.Decide(req("dev", "bot", "exec", list(1000)), "")
	assert.Equal(t, policy.Deny, d.Outcome, "over the cost limit: the allow rule does not match and the deny rule fails closed")
	assert.Equal(t, events.CodePolicyDenied, d.Code)
	assert.Equal(t, "deny-quadratic", d.Rule)
	assert.Contains(t, d.Reason, "cost limit")
}
