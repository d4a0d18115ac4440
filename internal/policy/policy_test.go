package policy_test

import (
	"encoding/json"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/stretchr/testify/assert"
)

func TestDecide(t *testing.T) {
	p := policy.New(policy.Spec{
		Tools:       map[string]string{"ls": "read", "edit": "write", "sh": "exec", "curl": "network", "rm": "destructive", "odd": "sideways"},
		DefaultMode: "auto",
		Workspaces:  map[string]string{"vault": "locked", "broken": "auto-ish"},
	})
	cases := []struct {
		ws, tool string
		outcome  policy.Outcome
		code     events.Code
		class    policy.Class
	}{
		{"dev", "ls", policy.Allow, "", policy.ClassRead},
		{"dev", "edit", policy.Allow, "", policy.ClassWrite},
		{"dev", "sh", policy.Allow, "", policy.ClassExec},
		{"dev", "curl", policy.Allow, "", policy.ClassNetwork},
		{"dev", "rm", policy.Deny, events.CodeCapabilityDenied, policy.ClassDestructive},
		{"dev", "odd", policy.Deny, events.CodeCapabilityDenied, policy.ClassDestructive},     // a class that does not parse fails closed
		{"dev", "unheard", policy.Deny, events.CodeCapabilityDenied, policy.ClassDestructive}, // an unknown tool too
		{"vault", "ls", policy.Allow, "", policy.ClassRead},
		{"vault", "edit", policy.Deny, events.CodeWorkspaceLocked, policy.ClassWrite},
		{"broken", "edit", policy.Deny, events.CodeWorkspaceLocked, policy.ClassWrite}, // a mode that does not parse is locked
		{"broken", "ls", policy.Allow, "", policy.ClassRead},
	}
	for _, tc := range cases {
		t.Run(tc.ws+"/"+tc.tool, func(t *testing.T) {
			d := p.Decide(&events.Request{Workspace: tc.ws, Agent: "a", Tool: tc.tool, Args: json.RawMessage(`{}`)})
			assert.Equal(t, tc.outcome, d.Outcome)
			assert.Equal(t, tc.code, d.Code)
			assert.Equal(t, tc.class, d.Class)
			assert.Equal(t, p.Hash(), d.Hash)
			assert.NotEmpty(t, d.Reason)
		})
	}
}

func TestHash(t *testing.T) {
	a := policy.New(policy.Spec{Tools: map[string]string{"ls": "read", "x": "bogus"}, Workspaces: map[string]string{"w": "locked"}})
	// The same meaning in other words: bogus parses to destructive.
	b := policy.New(policy.Spec{Tools: map[string]string{"x": "destructive", "ls": "read"}, DefaultMode: "auto", Workspaces: map[string]string{"w": "nonsense"}})
	c := policy.New(policy.Spec{Tools: map[string]string{"ls": "write"}})
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, a.Hash())
	assert.Equal(t, a.Hash(), b.Hash())
	assert.NotEqual(t, a.Hash(), c.Hash())
	assert.Equal(t, []string{"ls", "x"}, a.Tools())
}
