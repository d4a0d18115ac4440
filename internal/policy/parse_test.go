package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/internal/policy"
)

const sampleYAML = `# a sample policy
tools:
  echo: read
  exec: exec
  remote: network
default_mode: confirm
workspaces:
  dev:
    mode: auto
    root: /srv/dev
    agents:
      intern: confirm
  vault:
    mode: locked
rules:
  - name: hold-rm
    when: |
      tool == "exec" && "rm" in args.argv
    action: hold
    reason: rm needs an approver
  - name: deny-far-hosts
    when: tool == "remote" && !(args.host in ["api.example.com"])
    action: deny
hold_ttl: 10m
`

// The same policy in JSON, keys in another order, tab-indented.
const sampleJSON = "{\n" +
	"\t\"hold_ttl\": \"600s\",\n" +
	"\t\"rules\": [\n" +
	"\t\t{\"action\": \"hold\", \"name\": \"hold-rm\", \"reason\": \"rm needs an approver\", \"when\": \"tool == \\\"exec\\\" && \\\"rm\\\" in args.argv\"},\n" +
	"\t\t{\"name\": \"deny-far-hosts\", \"action\": \"deny\", \"when\": \"tool == \\\"remote\\\" && !(args.host in [\\\"api.example.com\\\"])\"}\n" +
	"\t],\n" +
	"\t\"workspaces\": {\n" +
	"\t\t\"vault\": {\"mode\": \"locked\"},\n" +
	"\t\t\"dev\": {\"agents\": {\"intern\": \"confirm\"}, \"root\": \"/srv/dev\", \"mode\": \"auto\"}\n" +
	"\t},\n" +
	"\t\"default_mode\": \"confirm\",\n" +
	"\t\"tools\": {\"remote\": \"network\", \"exec\": \"exec\", \"echo\": \"read\"}\n" +
	"}\n"

func TestParseYAMLAndJSONShareAHash(t *testing.T) {
	y, err := policy.Parse([]byte(sampleYAML))
	require.NoError(t, err)
	j, err := policy.Parse([]byte(sampleJSON))
	require.NoError(t, err)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, y.Hash())
	assert.Equal(t, y.Hash(), j.Hash())
	assert.Empty(t, y.Warnings())
	assert.Empty(t, j.Warnings())

	assert.Equal(t, []string{"echo", "exec", "remote"}, y.Tools())
	assert.Equal(t, policy.ModeConfirm, y.Mode("dev", "intern"))
	assert.Equal(t, policy.ModeAuto, y.Mode("dev", "bot"))
	assert.Equal(t, policy.ModeLocked, y.Mode("vault", "bot"))
	assert.Equal(t, policy.ModeConfirm, y.Mode("other", "bot"))
	assert.Equal(t, "/srv/dev", y.Root("dev"))
	assert.Equal(t, 10*60.0, y.HoldTTL().Seconds())

	d := y.Decide(req("dev", "bot", "exec", `{"argv":["rm","-rf","x"]}`), "")
	assert.Equal(t, policy.Hold, d.Outcome)
	assert.Equal(t, "hold-rm", d.Rule)
	assert.Equal(t, "rm needs an approver", d.Reason)
	d = j.Decide(req("dev", "bot", "remote", `{"host":"evil.example.net"}`), "")
	assert.Equal(t, policy.Deny, d.Outcome)
	assert.Equal(t, "deny-far-hosts", d.Rule)
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"empty", "", "policy: empty document"},
		{"only comments", "# nothing\n\n", "policy: empty document"},
		{"document marker only", "---\n", "policy: empty document"},
		{"null", "null\n", "policy: empty document"},
		{"not a mapping", "- tools\n", "policy: line 1: the document must be a mapping"},
		{"scalar document", "hello\n", "policy: line 1: the document must be a mapping"},
		{"unknown top-level key", "tools: {echo: read}\ntool: {}\n", `policy: line 2: unknown key "tool" in the document; known keys: default_mode, hold_ttl, results, rules, tools, workspaces`},
		{"unknown top-level key in JSON", `{"tools": {}, "holdTTL": "1m"}`, `policy: line 1: unknown key "holdTTL" in the document`},
		{"unknown workspace key", "workspaces:\n  dev:\n    mode: auto\n    moed: confirm\n", `policy: line 4: unknown key "moed" in workspaces.dev; known keys: agents, mode, notify, results, root`},
		{"unknown rule key", "rules:\n  - name: r\n    when: 'true'\n    action: allow\n    priority: 1\n", `policy: line 5: unknown key "priority" in rules[0]; known keys: action, name, reason, when`},
		{"duplicate top-level key", "default_mode: auto\ndefault_mode: locked\n", `policy: line 2: duplicate key "default_mode" in the document (first at line 1)`},
		{"duplicate tool", "tools:\n  echo: read\n  echo: destructive\n", `policy: line 3: duplicate key "echo" in tools (first at line 2)`},
		{"duplicate key in JSON", `{"tools": {"echo": "read", "echo": "write"}}`, `duplicate key "echo" in tools`},
		{"duplicate agent", "workspaces:\n  dev:\n    agents: {bot: auto, bot: locked}\n", `duplicate key "bot" in workspaces.dev.agents`},
		{"tools is a list", "tools: [echo]\n", "policy: line 1: tools must be a mapping"},
		{"rules is a mapping", "rules: {name: r}\n", "policy: line 1: rules must be a list"},
		{"class is a list", "tools:\n  echo: [read]\n", "policy: line 2: tools.echo must be a single value"},
		{"rule is a string", "rules:\n  - hold everything\n", "policy: line 2: rules[0] must be a mapping"},
		{"alias", "default_mode: &m locked\nworkspaces:\n  dev:\n    mode: *m\n", "policy: line 4: workspaces.dev.mode: yaml aliases are not allowed"},
		{"merge key", "workspaces:\n  base: &b {mode: auto}\n  dev:\n    <<: *b\n", `policy: line 4: unknown key "<<" in workspaces.dev`},
		{"two documents", "tools: {}\n---\ntools: {echo: read}\n", "policy: line 2: more than one document"},
		{"syntax error", "tools: {echo: read\n", "policy: "},
		{"bad name from the file", "tools:\n  Echo: read\n", `policy: tools: tool name "Echo" must match`},
		{"bad hold_ttl", "hold_ttl: 90\n", `policy: hold_ttl "90"`},
		{"bad rule", "rules:\n  - name: r\n    when: argz\n    action: deny\n", `policy: rule "r" (rules[0]): 1:1: undeclared reference to 'argz'`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tc.in))
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "policy: "), err.Error())
			assert.NotContains(t, err.Error(), "yaml: ")
		})
	}
}

func TestParseAccepts(t *testing.T) {
	cases := []struct{ name, in string }{
		{"empty mapping", "{}"},
		{"empty sections", "tools:\nworkspaces:\nrules:\n"},
		{"workspace without settings", "workspaces:\n  dev:\n"},
		{"folded when", "rules:\n  - name: r\n    when: >\n      tool == \"exec\"\n      && class == \"exec\"\n    action: hold\n"},
		{"JSON on one line", `{"tools":{"echo":"read"},"default_mode":"auto"}`},
		{"anchor without alias", "default_mode: &m auto\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tc.in))
			require.NoError(t, err)
			assert.Empty(t, p.Warnings())
		})
	}
}

func TestParseSizeLimit(t *testing.T) {
	head := "tools:\n  echo: read\n"
	pad := func(n int) []byte {
		var b strings.Builder
		b.WriteString(head)
		for b.Len() < n {
			line := "#" + strings.Repeat("x", min(1000, n-b.Len()-2)) + "\n"
			if n-b.Len() < 2 {
				line = "\n"
			}
			b.WriteString(line)
		}
		require.Equal(t, n, b.Len())
		return []byte(b.String())
	}
	p, err := policy.Parse(pad(policy.MaxPolicyBytes))
	require.NoError(t, err, "a file at the limit parses")
	assert.Equal(t, []string{"echo"}, p.Tools())

	_, err = policy.Parse(pad(policy.MaxPolicyBytes + 1))
	require.Error(t, err)
	assert.Equal(t, "policy: file is over the 1048576-byte limit", err.Error())

	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, pad(2*policy.MaxPolicyBytes), 0o600))
	_, err = policy.Load(big)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "over the 1048576-byte limit")
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(sampleYAML), 0o600))
	p, err := policy.Load(path)
	require.NoError(t, err)
	q, err := policy.Parse([]byte(sampleYAML))
	require.NoError(t, err)
	assert.Equal(t, q.Hash(), p.Hash())

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("tools: {}\nextra: 1\n"), 0o600))
	_, err = policy.Load(bad)
	require.Error(t, err)
	assert.Equal(t, "policy: "+bad+`: line 2: unknown key "extra" in the document; known keys: default_mode, hold_ttl, results, rules, tools, workspaces`, err.Error())

	_, err = policy.Load(filepath.Join(dir, "missing.yaml"))
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "policy: "), err.Error())
	assert.ErrorIs(t, err, os.ErrNotExist)
}
