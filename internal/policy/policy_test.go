package policy_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
)

// req is a validated-looking request.
func req(ws, agent, tool, args string) *events.Request {
	return &events.Request{Workspace: ws, Agent: agent, Tool: tool, Args: json.RawMessage(args)}
}

func TestParseClassAndMode(t *testing.T) {
	for _, c := range []policy.Class{policy.ClassRead, policy.ClassWrite, policy.ClassExec, policy.ClassNetwork, policy.ClassDestructive} {
		assert.Equal(t, c, policy.ParseClass(string(c)))
	}
	for _, s := range []string{"", "READ", "sideways", " read"} {
		assert.Equal(t, policy.ClassDestructive, policy.ParseClass(s), s)
	}
	for _, m := range []policy.Mode{policy.ModeAuto, policy.ModeConfirm, policy.ModeLocked} {
		assert.True(t, policy.ValidMode(string(m)))
		assert.Equal(t, m, policy.ParseMode(string(m)))
	}
	for _, s := range []string{"", "AUTO", "auto-ish", "unlocked"} {
		assert.False(t, policy.ValidMode(s), s)
		assert.Equal(t, policy.ModeLocked, policy.ParseMode(s), s)
	}
}

func TestNewNames(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := []struct {
		name    string
		spec    policy.Spec
		wantErr string
	}{
		{"tool name at limit", policy.Spec{Tools: map[string]string{long: "read"}}, ""},
		{"tool name over limit", policy.Spec{Tools: map[string]string{long + "a": "read"}}, `policy: tools: tool name "` + long + `a" must match`},
		{"tool name upper case", policy.Spec{Tools: map[string]string{"Echo": "read"}}, `tool name "Echo"`},
		{"tool name empty", policy.Spec{Tools: map[string]string{"": "read"}}, `tool name ""`},
		{"workspace name at limit", policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{long: {}}}, ""},
		{"workspace name over limit", policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{long + "a": {}}}, `policy: workspaces: workspace name`},
		{"workspace name with space", policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"my ws": {}}}, `workspace name "my ws"`},
		{"agent name at limit", policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"dev": {Agents: map[string]string{long: "auto"}}}}, ""},
		{"agent name over limit", policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"dev": {Agents: map[string]string{long + "a": "auto"}}}}, `policy: workspaces.dev.agents: agent name`},
		{"agent name leading dash", policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"dev": {Agents: map[string]string{"-bot": "auto"}}}}, `agent name "-bot"`},
		{"root at limit", policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"dev": {Root: "/" + strings.Repeat("r", policy.MaxRootBytes-1)}}}, ""},
		{"root over limit", policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"dev": {Root: "/" + strings.Repeat("r", policy.MaxRootBytes)}}}, "policy: workspaces.dev.root is 4097 bytes, limit 4096"},
		{"root with NUL", policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"dev": {Root: "/srv\x00x"}}}, "NUL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.New(tc.spec)
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.NotNil(t, p)
				return
			}
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.True(t, strings.HasPrefix(err.Error(), "policy: "), err.Error())
		})
	}
}

func TestHoldTTL(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", policy.DefaultHoldTTL, true},
		{"15m", 15 * time.Minute, true},
		{"1s", policy.MinHoldTTL, true},
		{"999ms", 0, false},
		{"720h", policy.MaxHoldTTL, true},
		{"720h0m1s", 0, false},
		{"-5m", 0, false},
		{"15", 0, false},
		{"soon", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			p, err := policy.New(policy.Spec{HoldTTL: tc.in})
			if !tc.ok {
				require.Error(t, err)
				assert.Contains(t, err.Error(), `policy: hold_ttl "`+tc.in+`"`)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, p.HoldTTL())
		})
	}
}

func TestCorruptClassesAndModesFailClosedWithWarnings(t *testing.T) {
	p, err := policy.New(policy.Spec{
		Tools:       map[string]string{"echo": "read", "odd": "sideways"},
		DefaultMode: "confirm",
		Workspaces: map[string]policy.WorkspaceSpec{
			"broken": {Mode: "auto-ish"},
			"dev":    {Agents: map[string]string{"bot": "AUTO"}},
		},
	})
	require.NoError(t, err, "a corrupt class or mode is not a load error")
	assert.Equal(t, policy.ClassDestructive, p.Class("odd"))
	assert.Equal(t, policy.ModeLocked, p.Mode("broken", "anyone"))
	assert.Equal(t, policy.ModeLocked, p.Mode("dev", "bot"))
	assert.Equal(t, policy.ModeConfirm, p.Mode("dev", "other"))

	w := p.Warnings()
	require.Len(t, w, 3)
	assert.Contains(t, w[0], `tools.odd: class "sideways"`)
	assert.Contains(t, w[0], "destructive")
	assert.Contains(t, w[1], `workspaces.broken.mode: mode "auto-ish"`)
	assert.Contains(t, w[1], "locked")
	assert.Contains(t, w[2], `workspaces.dev.agents.bot: mode "AUTO"`)

	// A corrupt default mode locks every workspace not listed.
	q, err := policy.New(policy.Spec{DefaultMode: "yes"})
	require.NoError(t, err)
	assert.Equal(t, policy.ModeLocked, q.Mode("any", "one"))
	assert.Len(t, q.Warnings(), 1)

	// The caller owns the slice.
	w[0] = "changed"
	assert.NotEqual(t, "changed", p.Warnings()[0])
	assert.Empty(t, policy.MustNew(policy.Spec{}).Warnings())
}

func TestModeResolution(t *testing.T) {
	p := policy.MustNew(policy.Spec{
		DefaultMode: "confirm",
		Workspaces: map[string]policy.WorkspaceSpec{
			"dev":   {Mode: "auto", Root: "/srv/dev", Agents: map[string]string{"intern": "confirm", "ops": "locked"}},
			"plain": {},
		},
	})
	assert.Equal(t, policy.ModeConfirm, p.Mode("elsewhere", "a"), "unlisted workspace: default_mode")
	assert.Equal(t, policy.ModeConfirm, p.Mode("plain", "a"), "workspace without mode: default_mode")
	assert.Equal(t, policy.ModeAuto, p.Mode("dev", "a"))
	assert.Equal(t, policy.ModeConfirm, p.Mode("dev", "intern"))
	assert.Equal(t, policy.ModeLocked, p.Mode("dev", "ops"))
	assert.Equal(t, "/srv/dev", p.Root("dev"))
	assert.Equal(t, "", p.Root("plain"))
	assert.Equal(t, "", p.Root("elsewhere"))

	assert.Equal(t, policy.ModeAuto, policy.MustNew(policy.Spec{}).Mode("x", "y"), "no default_mode: auto")
}

func TestSpecIsADeepCopy(t *testing.T) {
	in := policy.Spec{
		Tools:      map[string]string{"echo": "read"},
		Workspaces: map[string]policy.WorkspaceSpec{"dev": {Mode: "auto", Agents: map[string]string{"bot": "confirm"}}},
		Rules:      []policy.RuleSpec{{Name: "r", When: "true", Action: "allow"}},
		HoldTTL:    "5m",
	}
	p := policy.MustNew(in)
	hash := p.Hash()

	// Changing the input after New changes nothing.
	in.Tools["echo"] = "destructive"
	in.Workspaces["dev"].Agents["bot"] = "locked"
	in.Rules[0].Action = "deny"
	assert.Equal(t, policy.ClassRead, p.Class("echo"))
	assert.Equal(t, policy.ModeConfirm, p.Mode("dev", "bot"))

	// Changing the output of Spec changes nothing either.
	out := p.Spec()
	assert.Equal(t, "read", out.Tools["echo"])
	assert.Equal(t, "confirm", out.Workspaces["dev"].Agents["bot"])
	assert.Equal(t, "allow", out.Rules[0].Action)
	out.Tools["echo"] = "write"
	out.Workspaces["dev"].Agents["bot"] = "locked"
	out.Rules[0].Name = "other"
	again := p.Spec()
	assert.Equal(t, "read", again.Tools["echo"])
	assert.Equal(t, "confirm", again.Workspaces["dev"].Agents["bot"])
	assert.Equal(t, "r", again.Rules[0].Name)
	assert.Equal(t, hash, p.Hash())

	// A spec round-trips: the copy builds the same policy.
	assert.Equal(t, hash, policy.MustNew(p.Spec()).Hash())
}

func TestToolsAndClass(t *testing.T) {
	p := policy.MustNew(policy.Spec{Tools: map[string]string{"zed": "write", "echo": "read", "odd": "x"}})
	assert.Equal(t, []string{"echo", "odd", "zed"}, p.Tools())
	assert.Equal(t, policy.ClassWrite, p.Class("zed"))
	assert.Equal(t, policy.ClassDestructive, p.Class("odd"))
	assert.Equal(t, policy.ClassDestructive, p.Class("unheard"), "a tool the policy does not name is destructive")
	assert.Empty(t, policy.MustNew(policy.Spec{}).Tools())
}

func TestMustNewPanicsOnError(t *testing.T) {
	assert.PanicsWithError(t, `policy: hold_ttl "x": want a duration from 1s to 720h0m0s, such as 15m`, func() {
		policy.MustNew(policy.Spec{HoldTTL: "x"})
	})
}
