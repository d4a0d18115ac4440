package policy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/internal/policy"
)

func baseSpec() policy.Spec {
	return policy.Spec{
		Tools:       map[string]string{"echo": "read", "exec": "exec"},
		DefaultMode: "auto",
		Workspaces:  map[string]policy.WorkspaceSpec{"dev": {Mode: "confirm", Root: "/srv/dev", Agents: map[string]string{"bot": "auto"}}},
		Rules:       []policy.RuleSpec{{Name: "hold-rm", When: `tool == "exec"`, Action: "hold", Reason: "r"}},
		HoldTTL:     "15m",
	}
}

func TestHashSameMeaning(t *testing.T) {
	base := policy.MustNew(baseSpec())
	same := map[string]func(*policy.Spec){
		"default mode spelt out or not": func(s *policy.Spec) { s.DefaultMode = "" },
		"hold_ttl in other units":       func(s *policy.Spec) { s.HoldTTL = "900s" },
		"hold_ttl left to the default":  func(s *policy.Spec) { s.HoldTTL = "" },
		"when with surrounding space":   func(s *policy.Spec) { s.Rules[0].When = "  tool == \"exec\"\n" },
		"an empty notify": func(s *policy.Spec) {
			w := s.Workspaces["dev"]
			w.Notify = &policy.NotifySpec{}
			s.Workspaces["dev"] = w
		},
		"same maps built anew": func(s *policy.Spec) {
			s.Tools = map[string]string{"exec": "exec", "echo": "read"}
		},
	}
	for name, change := range same {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			change(&s)
			p := policy.MustNew(s)
			assert.Equal(t, base.Hash(), p.Hash())
		})
	}

	// A class or mode that does not parse hashes as what it becomes.
	a := policy.MustNew(policy.Spec{Tools: map[string]string{"x": "bogus"}, Workspaces: map[string]policy.WorkspaceSpec{"w": {Mode: "nonsense"}}})
	b := policy.MustNew(policy.Spec{Tools: map[string]string{"x": "destructive"}, Workspaces: map[string]policy.WorkspaceSpec{"w": {Mode: "locked"}}})
	assert.Equal(t, a.Hash(), b.Hash())

	// A workspace mode left to the default hashes as the default.
	c := policy.MustNew(policy.Spec{DefaultMode: "confirm", Workspaces: map[string]policy.WorkspaceSpec{"w": {}}})
	d := policy.MustNew(policy.Spec{DefaultMode: "confirm", Workspaces: map[string]policy.WorkspaceSpec{"w": {Mode: "confirm"}}})
	assert.Equal(t, c.Hash(), d.Hash())

	// Nil and empty collections mean the same.
	e := policy.MustNew(policy.Spec{})
	f := policy.MustNew(policy.Spec{Tools: map[string]string{}, Workspaces: map[string]policy.WorkspaceSpec{}, Rules: []policy.RuleSpec{}})
	assert.Equal(t, e.Hash(), f.Hash())
}

func TestHashChangesWithMeaning(t *testing.T) {
	base := policy.MustNew(baseSpec())
	changes := map[string]func(*policy.Spec){
		"class":        func(s *policy.Spec) { s.Tools["echo"] = "write" },
		"new tool":     func(s *policy.Spec) { s.Tools["more"] = "read" },
		"default mode": func(s *policy.Spec) { s.DefaultMode = "confirm" },
		"workspace mode": func(s *policy.Spec) {
			s.Workspaces["dev"] = policy.WorkspaceSpec{Mode: "locked", Root: "/srv/dev", Agents: map[string]string{"bot": "auto"}}
		},
		"root": func(s *policy.Spec) {
			s.Workspaces["dev"] = policy.WorkspaceSpec{Mode: "confirm", Root: "/srv/other", Agents: map[string]string{"bot": "auto"}}
		},
		"agent mode":    func(s *policy.Spec) { s.Workspaces["dev"].Agents["bot"] = "locked" },
		"new workspace": func(s *policy.Spec) { s.Workspaces["ops"] = policy.WorkspaceSpec{} },
		"rule when":     func(s *policy.Spec) { s.Rules[0].When = `tool == "echo"` },
		"rule action":   func(s *policy.Spec) { s.Rules[0].Action = "deny" },
		"rule name":     func(s *policy.Spec) { s.Rules[0].Name = "other" },
		"rule reason":   func(s *policy.Spec) { s.Rules[0].Reason = "another" },
		"rule order": func(s *policy.Spec) {
			s.Rules = append(s.Rules, policy.RuleSpec{Name: "first", When: "true", Action: "allow"})
			s.Rules[0], s.Rules[1] = s.Rules[1], s.Rules[0]
		},
		"no rules": func(s *policy.Spec) { s.Rules = nil },
		"hold_ttl": func(s *policy.Spec) { s.HoldTTL = "15m1s" },
		"webhook": func(s *policy.Spec) {
			w := s.Workspaces["dev"]
			w.Notify = &policy.NotifySpec{Webhook: "https://hooks.example.com/T0/B0/x"}
			s.Workspaces["dev"] = w
		},
	}
	seen := map[string]string{base.Hash(): "base"}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			change(&s)
			p, err := policy.New(s)
			require.NoError(t, err)
			assert.NotEqual(t, base.Hash(), p.Hash())
			prev, dup := seen[p.Hash()]
			assert.False(t, dup, "same hash as %s", prev)
			seen[p.Hash()] = name
		})
	}
}
