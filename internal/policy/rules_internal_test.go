package policy

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rule whose worst-case cost is bounded whatever args hold runs
// unmetered; one whose cost grows with args is metered.
func TestRuleMetering(t *testing.T) {
	cases := []struct {
		when    string
		metered bool
	}{
		{`tool == "exec"`, false},
		{`workspace == "prod" && class != "read"`, false},
		{`tool == "remote" && !(args.host in ["api.example.com", "files.example.com"])`, false},
		{`has(args.cwd) && args.cwd.startsWith("/etc")`, false},
		{`args.m.k == "v" && args.n > 3`, false},
		{`args.argv.exists(a, a == "rm")`, true},
		{`args.url.matches("^http://internal\\.")`, true},
		{`args.s.contains("x")`, true},
		{`args.a == args.b`, true},
	}
	env, err := celEnv()
	require.NoError(t, err)
	big := strings.Repeat("x", 200_000)
	items := make([]string, 5000)
	for i := range items {
		items[i] = fmt.Sprintf("%q", big[:i%50])
	}
	args := fmt.Sprintf(`{"host":%q,"cwd":%q,"m":{"k":%q},"n":7,"argv":[%s],"url":%q,"s":%q,"a":%q,"b":%q}`,
		big, big, big, strings.Join(items, ","), big, big, big, big)
	for _, tc := range cases {
		t.Run(tc.when, func(t *testing.T) {
			rs, err := compileRules([]RuleSpec{{Name: "r", When: tc.when, Action: "deny"}})
			require.NoError(t, err)
			assert.Equal(t, tc.metered, rs[0].metered)
			if tc.metered {
				return
			}
			// The estimate bounds what the tracker measures, even on
			// large args.
			ast, iss := env.Compile(tc.when)
			require.NoError(t, iss.Err())
			est, err := env.EstimateCost(ast, unknownSizes{})
			require.NoError(t, err)
			prg, err := env.Program(ast, cel.EvalOptions(cel.OptTrackCost))
			require.NoError(t, err)
			act := &activation{tool: types.String("remote"), class: types.String("network"),
				workspace: types.String("prod"), agent: types.String("a"), mode: types.String("auto"), rawArgs: []byte(args)}
			_, det, err := prg.Eval(act)
			require.NoError(t, err)
			require.NotNil(t, det.ActualCost())
			assert.LessOrEqual(t, *det.ActualCost(), est.Max)
			assert.LessOrEqual(t, est.Max, uint64(RuleCostLimit))
		})
	}
}

func TestTruncateKeepsUTF8(t *testing.T) {
	assert.Equal(t, "abc", truncate("abc", 3))
	assert.Equal(t, "ab...", truncate("abc", 2))
	s := truncate(strings.Repeat("é", 10), 5) // 2 bytes each
	assert.Equal(t, "éé...", s)
	assert.True(t, utf8.ValidString(s))
}
