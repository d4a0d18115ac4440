package deploy_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// selector is one metric a PromQL expression reads, with the label names
// its matchers name (nil when it has none).
type selector struct {
	name   string
	labels []string
}

var (
	// String literals: double, single and back quotes, with escapes.
	promString = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	// Grafana's template variables: $name, ${name}, ${name:format}.
	grafanaVar = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	// A metric name, if any, and the matchers in braces after it.
	braces = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^{}]*)\}`)
	// A label matcher's name.
	matcher = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`)
	// Range and subquery selectors, [5m] or [1h:1m].
	ranges = regexp.MustCompile(`\[[^\[\]]*\]`)
	// Label lists of aggregations and vector matching.
	grouping = regexp.MustCompile(`(?i)\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	// Numbers and durations (0.99, 1e3, 5m, 1h30m), then identifiers.
	promToken = regexp.MustCompile(`[0-9][0-9A-Za-z_.]*|[A-Za-z_:][A-Za-z0-9_:]*`)
)

// promKeywords are the words of PromQL that are neither metric names nor
// followed by a parenthesis.
var promKeywords = []string{
	"and", "or", "unless", "by", "without", "on", "ignoring",
	"group_left", "group_right", "bool", "offset", "atan2", "inf", "nan",
}

// selectors returns the metrics expr reads, in order. It is not a PromQL
// parser: it removes strings, template variables, matchers, ranges and
// label lists, and takes every remaining identifier that is not a keyword
// and not followed by "(" (a function or an aggregation) as a metric name.
// It fails on unbalanced brackets and on a selector without a name.
func selectors(expr string) ([]selector, error) {
	if err := balanced(expr); err != nil {
		return nil, err
	}
	e := promString.ReplaceAllString(expr, `""`)
	e = grafanaVar.ReplaceAllString(e, " ")
	var out []selector
	var errs []string
	e = braces.ReplaceAllStringFunc(e, func(m string) string {
		sub := braces.FindStringSubmatch(m)
		if sub[1] == "" {
			errs = append(errs, fmt.Sprintf("selector without a metric name: %s", m))
			return " "
		}
		var labels []string
		for _, l := range matcher.FindAllStringSubmatch(sub[2], -1) {
			labels = append(labels, l[1])
		}
		out = append(out, selector{name: sub[1], labels: labels})
		return " " // the name is taken here, with its labels
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	e = ranges.ReplaceAllString(e, " ")
	e = grouping.ReplaceAllString(e, " ")
	for _, loc := range promToken.FindAllStringIndex(e, -1) {
		w := e[loc[0]:loc[1]]
		if w[0] >= '0' && w[0] <= '9' || slices.Contains(promKeywords, strings.ToLower(w)) {
			continue
		}
		if rest := strings.TrimLeft(e[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		out = append(out, selector{name: w})
	}
	return out, nil
}

// balanced checks (), [] and {} outside string literals.
func balanced(expr string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, r := range promString.ReplaceAllString(expr, `""`) {
		switch r {
		case '(', '[', '{':
			stack = append(stack, r)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q in %s", r, expr)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %q in %s", stack[len(stack)-1], expr)
	}
	return nil
}

func TestSelectors(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want []selector
	}{
		{
			name: "bare gauge and comparison",
			expr: `airlock_projector_lag_messages > 1000`,
			want: []selector{{name: "airlock_projector_lag_messages"}},
		},
		{
			name: "aggregation with by before the body",
			expr: `sum by (tool, outcome) (rate(airlock_executions_total{instance="$instance", tool=~"exec|echo"}[$__rate_interval]))`,
			want: []selector{{name: "airlock_executions_total", labels: []string{"instance", "tool"}}},
		},
		{
			name: "aggregation with by after the body",
			expr: `sum(rate(airlock_rejected_total[5m])) by (code)`,
			want: []selector{{name: "airlock_rejected_total"}},
		},
		{
			name: "histogram quantile",
			expr: `histogram_quantile(0.99, sum by (le) (rate(airlock_grant_to_execution_seconds_bucket[1h:1m])))`,
			want: []selector{{name: "airlock_grant_to_execution_seconds_bucket"}},
		},
		{
			name: "binary operators, offset and vector matching",
			expr: `a{state="x"} - a{state="x"} offset 15m > 0 and on (instance) group_left b unless bool c`,
			want: []selector{
				{name: "a", labels: []string{"state"}}, {name: "a", labels: []string{"state"}},
				{name: "b"}, {name: "c"},
			},
		},
		{
			name: "label values with braces, quotes and a name inside strings",
			expr: `label_replace(up{job='a}b', x!~"\"airlock_fake\""}, "dst", "$1", "src", "(.*)")`,
			want: []selector{{name: "up", labels: []string{"job", "x"}}},
		},
		{
			name: "numbers and durations are not names",
			expr: `max without (instance) (x) / 1e3 + 0.5 * y[1h30m]`,
			want: []selector{{name: "x"}, {name: "y"}},
		},
		{
			name: "keywords in any case",
			expr: `p AND q OR r`,
			want: []selector{{name: "p"}, {name: "q"}, {name: "r"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := selectors(tc.expr)
			require.NoError(t, err)
			assert.ElementsMatch(t, tc.want, got)
		})
	}

	for _, bad := range []string{`rate(x[5m]`, `sum(x))`, `x{a="b"`, `{job="x"}`, `x[5m}`} {
		_, err := selectors(bad)
		assert.Error(t, err, bad)
	}
}
