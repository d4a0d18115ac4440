package metrics_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// declared reads names.go: each metric's name, and the kind and labels its
// comment gives ("// counter {tool, outcome}"), which the dashboard and
// alert checks in deploy/ rely on.
func declared(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, parser.ParseComments)
	require.NoError(t, err)
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			lit, ok := vs.Values[0].(*ast.BasicLit)
			require.True(t, ok)
			name, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			require.NotNil(t, vs.Comment, "%s has no kind comment", name)
			out[name] = strings.TrimSpace(strings.TrimPrefix(vs.Comment.Text(), "//"))
		}
	}
	return out
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// Every family the registry describes is declared in names.go with the
// labels it really has, and every declared name is described.
func TestNamesDeclareTheRegistry(t *testing.T) {
	f := newFixture(t, 1000)
	ch := make(chan *prometheus.Desc, 256)
	f.m.Registry().Describe(ch)
	close(ch)
	decl := declared(t)
	described := map[string]bool{}
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		require.NotNil(t, m, d.String())
		name := m[1]
		if !strings.HasPrefix(name, "airlock_") {
			continue
		}
		described[name] = true
		comment, ok := decl[name]
		require.True(t, ok, "%s is not declared in names.go", name)
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		var want []string
		if _, braces, ok := strings.Cut(comment, "{"); ok {
			for _, l := range strings.Split(strings.TrimSuffix(braces, "}"), ",") {
				want = append(want, strings.TrimSpace(l))
			}
		}
		slices.Sort(labels)
		slices.Sort(want)
		assert.Equal(t, want, labels, "labels of %s", name)
	}
	for name := range decl {
		assert.True(t, described[name], "%s is declared but not registered", name)
	}
	assert.ElementsMatch(t, metrics.Names(), keys(decl))

	// The kinds: every family gathered has the type its comment names.
	families, err := f.m.Registry().Gather()
	require.NoError(t, err)
	for _, fam := range families {
		if comment, ok := decl[fam.GetName()]; ok {
			kind, _, _ := strings.Cut(comment, " ")
			assert.Equal(t, kind, strings.ToLower(fam.GetType().String()), fam.GetName())
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
