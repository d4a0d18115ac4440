package executor_test

import (
	"testing"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The gate's process starts at most Config.Direct ops itself at once;
// past that Start says no (the op is decided), and a place given back is
// taken again. By default the bound is 2 × Loops × Workers.
func TestDirectPlacesAreBounded(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{})
	reg, err := executor.NewRegistry(executor.Echo{})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		cfg  executor.Config
		want int
	}{
		{"set", executor.Config{Direct: 3}, 3},
		{"default", executor.Config{Workers: 2, Loops: 3}, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.JetStream, cfg.Registry = n.JetStream, reg
			r, err := executor.NewRunner(cfg)
			require.NoError(t, err)
			var releases []func()
			for i := range tc.want {
				release, ok := r.Start("echo", "op"+string(rune('a'+i)))
				require.True(t, ok, "place %d of %d", i+1, tc.want)
				releases = append(releases, release)
			}
			_, ok := r.Start("echo", "op-over")
			assert.False(t, ok, "no place past the bound: the op is decided")
			releases[0]()
			release, ok := r.Start("echo", "op-over")
			assert.True(t, ok, "a place given back is taken again")
			release()
			for _, release := range releases[1:] {
				release()
			}
		})
	}
}
