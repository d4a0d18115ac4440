package policy_test

import (
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/stretchr/testify/require"
)

func TestResults(t *testing.T) {
	p, err := policy.Parse([]byte(`
results:
  ttl: 2h
workspaces:
  prod:
    results:
      ttl: 90s
      erase_after_delivery: true
  scratch:
    results:
      ttl: "0"
      erase_after_delivery: true
  dev:
    mode: auto
`))
	require.NoError(t, err)
	r, ok := p.Results("prod")
	require.True(t, ok)
	require.Equal(t, events.Retention{TTLSeconds: 90, EraseOnDelivery: true}, r)
	r, ok = p.Results("scratch")
	require.True(t, ok)
	require.Equal(t, events.Retention{}, r, "ttl 0 keeps none, and so erases nothing on delivery")
	r, ok = p.Results("dev")
	require.True(t, ok, "a workspace without results of its own gets the top-level ones")
	require.Equal(t, events.Retention{TTLSeconds: 7200}, r)

	once, err := policy.Parse([]byte("workspaces:\n  w:\n    results:\n      erase_after_delivery: true\n"))
	require.NoError(t, err)
	r, ok = once.Results("w")
	require.True(t, ok)
	require.Equal(t, events.Retention{TTLSeconds: policy.DefaultTTL, EraseOnDelivery: true}, r, "no ttl: serve's --result-ttl")

	none, err := policy.Parse([]byte("workspaces:\n  dev:\n    mode: auto\n"))
	require.NoError(t, err)
	_, ok = none.Results("dev")
	require.False(t, ok, "a policy that says nothing leaves it to serve's --result-ttl")
}

func TestResultsRefusesBadTTL(t *testing.T) {
	for _, ttl := range []string{"-1s", "500ms", "1.5s", "721h", "soon"} {
		_, err := policy.Parse([]byte("results:\n  ttl: " + ttl + "\n"))
		require.ErrorContains(t, err, "results.ttl", ttl)
		_, err = policy.Parse([]byte("workspaces:\n  w:\n    results:\n      ttl: " + ttl + "\n"))
		require.ErrorContains(t, err, "workspaces.w.results.ttl", ttl)
	}
	_, err := policy.Parse([]byte("results:\n  keep: 1h\n"))
	require.ErrorContains(t, err, `unknown key "keep" in results; known keys: erase_after_delivery, ttl`)
}

// Results change the hash; a policy without them hashes as before they
// existed, so decisions recorded earlier keep naming it.
func TestResultsInHash(t *testing.T) {
	base := policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"w": {Mode: "auto"}}}
	a := policy.MustNew(base)
	with := base
	with.Results = &policy.ResultsSpec{TTL: "1h"}
	b := policy.MustNew(with)
	require.NotEqual(t, a.Hash(), b.Hash())
	ws := policy.Spec{Workspaces: map[string]policy.WorkspaceSpec{"w": {Mode: "auto", Results: &policy.ResultsSpec{TTL: "1h"}}}}
	require.NotEqual(t, a.Hash(), policy.MustNew(ws).Hash())
	require.NotEqual(t, b.Hash(), policy.MustNew(ws).Hash())
	require.Equal(t, "sha256:", a.Hash()[:7])
}
