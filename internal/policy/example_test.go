package policy_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
)

func ExampleParse() {
	p, err := policy.Parse([]byte(`
tools:
  exec: exec
  remote: network
rules:
  - name: deny-far-hosts
    when: tool == "remote" && !(args.host in ["api.example.com"])
    action: deny
    reason: remote calls go to api.example.com only
`))
	if err != nil {
		panic(err)
	}
	for _, r := range []*events.Request{
		{Workspace: "dev", Agent: "bot", Tool: "remote", Args: []byte(`{"host":"api.example.com"}`)},
		{Workspace: "dev", Agent: "bot", Tool: "remote", Args: []byte(`{"host":"evil.example.net"}`)},
		{Workspace: "dev", Agent: "bot", Tool: "wipe", Args: []byte(`{}`)},
	} {
		d := p.Decide(r, "")
		fmt.Printf("%s code=%q rule=%q\n", d.Outcome, d.Code, d.Rule)
	}
	// Output:
	// allow code="" rule=""
	// deny code="POLICY_DENIED" rule="deny-far-hosts"
	// deny code="CAPABILITY_DENIED" rule=""
}

const examplePath = "../../deploy/policy.example.yaml"

func TestExampleFileParsesCleanly(t *testing.T) {
	p, err := policy.Load(examplePath)
	require.NoError(t, err)
	assert.Empty(t, p.Warnings())

	// It uses every key of the format.
	raw, err := os.ReadFile(examplePath)
	require.NoError(t, err)
	for _, key := range fileKeys() {
		assert.Contains(t, string(raw), key+":", "the example uses %s", key)
	}
	spec := p.Spec()
	assert.NotEmpty(t, spec.Tools)
	assert.NotEmpty(t, spec.DefaultMode)
	assert.NotEmpty(t, spec.Rules)
	assert.NotEmpty(t, spec.HoldTTL)
	var roots, agents int
	for _, w := range spec.Workspaces {
		if w.Root != "" {
			roots++
		}
		agents += len(w.Agents)
	}
	assert.Positive(t, roots)
	assert.Positive(t, agents)
	for _, a := range []string{"allow", "deny", "hold"} {
		found := false
		for _, r := range spec.Rules {
			found = found || r.Action == a
		}
		assert.True(t, found, "the example has a %s rule", a)
	}
}

func TestDocsMentionEveryKey(t *testing.T) {
	raw, err := os.ReadFile("../../docs/policy.md")
	require.NoError(t, err)
	doc := string(raw)
	for _, key := range fileKeys() {
		assert.Contains(t, doc, "`"+key+"`", "docs/policy.md mentions %s", key)
	}
	for _, name := range []string{"tool", "class", "args", "workspace", "agent", "mode"} {
		assert.Contains(t, doc, "`"+name+"`", "docs/policy.md documents the CEL variable %s", name)
	}
	for _, limit := range []string{"MaxPolicyBytes", "MaxRules", "MaxRuleWhenBytes", "MaxRuleReasonBytes", "MaxRuleNameBytes", "MaxRootBytes", "MaxWebhookBytes", "RuleCostLimit", "MinHoldTTL", "MaxHoldTTL"} {
		assert.Contains(t, doc, limit, "docs/policy.md documents %s", limit)
	}
}

// fileKeys lists every key of a policy file, from the yaml tags of Spec,
// WorkspaceSpec, NotifySpec and RuleSpec.
func fileKeys() []string {
	var keys []string
	for _, v := range []any{policy.Spec{}, policy.WorkspaceSpec{}, policy.NotifySpec{}, policy.RuleSpec{}} {
		t := reflect.TypeOf(v)
		for i := range t.NumField() {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			keys = append(keys, tag)
		}
	}
	return keys
}

// The default policy as docs/policy.md shows it is Default().
func TestDocsShowTheDefaultPolicy(t *testing.T) {
	raw, err := os.ReadFile("../../docs/policy.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(raw), "## Default policy")
	require.True(t, ok)
	_, block, ok := strings.Cut(after, "```yaml\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	p, err := policy.Parse([]byte(block))
	require.NoError(t, err)
	assert.Equal(t, policy.Default().Hash(), p.Hash())
}

func TestExampleFileDecisions(t *testing.T) {
	p, err := policy.Load(examplePath)
	require.NoError(t, err)
	cases := []struct {
		ws, agent, tool, args string
		outcome               policy.Outcome
		code                  events.Code
		rule                  string
	}{
		{"dev", "bot", "exec", `{"argv":["make"]}`, policy.Allow, "", ""},
		{"dev", "intern", "exec", `{"argv":["make"]}`, policy.Hold, events.CodeApprovalRequired, ""},
		{"prod", "bot", "exec", `{"argv":["git","status"]}`, policy.Allow, "", "allow-git-read"},
		{"prod", "bot", "exec", `{"argv":["git","push"]}`, policy.Hold, events.CodeApprovalRequired, ""},
		{"dev", "bot", "exec", `{"argv":["rm","-rf","build"]}`, policy.Hold, events.CodeApprovalRequired, "hold-exec-rm"},
		{"dev", "bot", "remote", `{"host":"api.example.com"}`, policy.Allow, "", ""},
		{"dev", "bot", "remote", `{"host":"evil.example.net"}`, policy.Deny, events.CodePolicyDenied, "deny-far-hosts"},
		{"dev", "bot", "remote", `{}`, policy.Deny, events.CodePolicyDenied, "deny-far-hosts"},
		{"prod", "release-bot", "apply_patch", `{"patch":"small"}`, policy.Allow, "", ""},
		{"prod", "release-bot", "apply_patch", `{"patch":"` + strings.Repeat("x", 20001) + `"}`, policy.Hold, events.CodeApprovalRequired, "hold-big-prod-patches"},
		{"prod", "auditor", "echo", `{}`, policy.Allow, "", ""},
		{"prod", "auditor", "apply_patch", `{}`, policy.Deny, events.CodeWorkspaceLocked, ""},
		{"dev", "dba", "drop_database", `{}`, policy.Allow, "", "allow-dba-drop-in-dev"},
		{"dev", "bot", "drop_database", `{}`, policy.Deny, events.CodeCapabilityDenied, ""},
		{"vault", "dba", "exec", `{"argv":["git","status"]}`, policy.Deny, events.CodeWorkspaceLocked, ""},
		{"elsewhere", "bot", "apply_patch", `{}`, policy.Hold, events.CodeApprovalRequired, ""},
	}
	for _, tc := range cases {
		t.Run(tc.ws+"/"+tc.agent+"/"+tc.tool, func(t *testing.T) {
			d := p.Decide(req(tc.ws, tc.agent, tc.tool, tc.args), "")
			assert.Equal(t, tc.outcome, d.Outcome, d.Reason)
			assert.Equal(t, tc.code, d.Code)
			assert.Equal(t, tc.rule, d.Rule)
		})
	}
}

func TestDecideConcurrently(t *testing.T) {
	p, err := policy.Load(examplePath)
	require.NoError(t, err)
	want := p.Decide(req("dev", "bot", "exec", `{"argv":["rm","-rf","x"]}`), "")
	var wg sync.WaitGroup
	results := make([]policy.Decision, 8)
	for i := range results {
		wg.Go(func() {
			for range 200 {
				results[i] = p.Decide(req("dev", "bot", "exec", `{"argv":["rm","-rf","x"]}`), "")
			}
		})
	}
	wg.Wait()
	for _, d := range results {
		assert.Equal(t, want, d)
	}
}
