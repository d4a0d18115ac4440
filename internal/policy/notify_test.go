package policy_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/internal/policy"
)

func TestWebhook(t *testing.T) {
	p, err := policy.Parse([]byte(`
workspaces:
  prod:
    mode: confirm
    notify:
      webhook: https://hooks.example.com/T000/B000/XXX
  staging:
    notify:
      webhook: "http://127.0.0.1:8080/hook?token=abc#frag"
  quiet:
    notify:
  dev:
    mode: auto
`))
	require.NoError(t, err)
	assert.Equal(t, "https://hooks.example.com/T000/B000/XXX", p.Webhook("prod"))
	assert.Equal(t, "http://127.0.0.1:8080/hook?token=abc#frag", p.Webhook("staging"))
	assert.Empty(t, p.Webhook("quiet"), "an empty notify names no webhook")
	assert.Empty(t, p.Webhook("dev"))
	assert.Empty(t, p.Webhook("unlisted"))
	assert.True(t, p.HasWebhooks())
	quiet, err := policy.Parse([]byte("workspaces:\n  quiet:\n    notify:\n  dev:\n    mode: auto\n"))
	require.NoError(t, err)
	assert.False(t, quiet.HasWebhooks())
	assert.False(t, policy.Default().HasWebhooks())
	assert.Equal(t, "https://hooks.example.com/T000/B000/XXX", p.Spec().Workspaces["prod"].Notify.Webhook)

	// Spec returns a copy: changing it changes nothing of the policy.
	s := p.Spec()
	s.Workspaces["prod"].Notify.Webhook = "https://elsewhere.example.com/"
	assert.Equal(t, "https://hooks.example.com/T000/B000/XXX", p.Spec().Workspaces["prod"].Notify.Webhook)

	// The same policy in JSON has the same hash; another webhook another.
	j, err := policy.Parse([]byte(`{"workspaces": {"dev": {"mode": "auto"}, "quiet": {"notify": {}}, "prod": {"mode": "confirm", "notify": {"webhook": "https://hooks.example.com/T000/B000/XXX"}},
		"staging": {"notify": {"webhook": "http://127.0.0.1:8080/hook?token=abc#frag"}}}}`))
	require.NoError(t, err)
	assert.Equal(t, p.Hash(), j.Hash())
	other, err := policy.Parse([]byte(`{"workspaces": {"dev": {"mode": "auto"}, "quiet": {"notify": {}}, "prod": {"mode": "confirm", "notify": {"webhook": "https://hooks.example.com/T000/B000/YYY"}},
		"staging": {"notify": {"webhook": "http://127.0.0.1:8080/hook?token=abc#frag"}}}}`))
	require.NoError(t, err)
	assert.NotEqual(t, p.Hash(), other.Hash())

	// At the limit it is accepted.
	long := "https://hooks.example.com/" + strings.Repeat("a", policy.MaxWebhookBytes-len("https://hooks.example.com/"))
	require.Len(t, long, policy.MaxWebhookBytes)
	q, err := policy.New(policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"w": {Notify: &policy.NotifySpec{Webhook: long}}}})
	require.NoError(t, err)
	assert.Equal(t, long, q.Webhook("w"))
}

func TestWebhookErrors(t *testing.T) {
	ws := func(notify string) string { return "workspaces:\n  prod:\n    mode: confirm\n    notify:\n" + notify }
	tooLong := "https://hooks.example.com/" + strings.Repeat("a", policy.MaxWebhookBytes+1-len("https://hooks.example.com/"))
	cases := []struct {
		name, in, want string
	}{
		{"bad scheme", ws("      webhook: ftp://hooks.example.com/x\n"), `policy: line 5: workspaces.prod.notify.webhook has scheme "ftp": want http or https`},
		{"javascript", ws("      webhook: javascript:alert(1)\n"), `policy: line 5: workspaces.prod.notify.webhook has scheme "javascript": want http or https`},
		{"relative", ws("      webhook: /hooks/T000\n"), "policy: line 5: workspaces.prod.notify.webhook must be an absolute http or https URL, not a relative one"},
		{"host only", ws("      webhook: hooks.example.com/T000\n"), "policy: line 5: workspaces.prod.notify.webhook must be an absolute http or https URL, not a relative one"},
		{"no host", ws("      webhook: https:///T000\n"), "policy: line 5: workspaces.prod.notify.webhook must be an absolute http or https URL with a host"},
		{"opaque", ws("      webhook: https:hooks.example.com\n"), "policy: line 5: workspaces.prod.notify.webhook must be an absolute http or https URL with a host"},
		{"user info", ws("      webhook: https://user:secret@hooks.example.com/x\n"), "policy: line 5: workspaces.prod.notify.webhook must not hold a user name or password"},
		{"not a URL", ws("      webhook: \"https://hooks.example.com/\\x7f\"\n"), "policy: line 5: workspaces.prod.notify.webhook is not a URL"},
		{"a number", ws("      webhook: 8080\n"), "policy: line 5: workspaces.prod.notify.webhook must be an absolute http or https URL, not a relative one"},
		{"too long", ws("      webhook: " + tooLong + "\n"), "policy: line 5: workspaces.prod.notify.webhook is 2049 bytes, limit 2048"},
		{"unknown key under notify", ws("      webhook: https://hooks.example.com/x\n      email: ops@example.com\n"), `policy: line 6: unknown key "email" in workspaces.prod.notify; known keys: webhook`},
		{"notify is a string", "workspaces:\n  prod:\n    notify: https://hooks.example.com/x\n", "policy: line 3: workspaces.prod.notify must be a mapping"},
		{"webhook is a list", ws("      webhook: [https://hooks.example.com/x]\n"), "policy: line 5: workspaces.prod.notify.webhook must be a single value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tc.in))
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "secret", "an error never quotes the URL")
			assert.NotContains(t, err.Error(), "hooks.example.com", "an error never quotes the URL")
		})
	}

	// New checks the same without a file, naming the key.
	_, err := policy.New(policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"prod": {Notify: &policy.NotifySpec{Webhook: "ftp://x/"}}}})
	require.Error(t, err)
	assert.Equal(t, `policy: workspaces.prod.notify.webhook has scheme "ftp": want http or https`, err.Error())
	_, err = policy.New(policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"prod": {Notify: &policy.NotifySpec{Webhook: tooLong}}}})
	require.Error(t, err)
	assert.Equal(t, "policy: workspaces.prod.notify.webhook is 2049 bytes, limit 2048", err.Error())
}
