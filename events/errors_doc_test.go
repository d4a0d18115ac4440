package events_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// declaredCodes reads every constant of type Code from errors.go.
func declaredCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	require.NoError(t, err)
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
			return true
		}
		for _, v := range vs.Values {
			lit, ok := v.(*ast.BasicLit)
			require.True(t, ok)
			s, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			codes = append(codes, s)
		}
		return true
	})
	sort.Strings(codes)
	return codes
}

func TestAllCodesListsEveryDeclaredCode(t *testing.T) {
	var all []string
	for _, c := range events.AllCodes {
		all = append(all, string(c))
	}
	sort.Strings(all)
	assert.Equal(t, declaredCodes(t), all)
}

// TestErrorsDocListsExactlyTheCodes keeps docs/errors.md and the code in
// step: every code has one row, and no row names a code that does not exist.
func TestErrorsDocListsExactlyTheCodes(t *testing.T) {
	doc, err := os.ReadFile("../docs/errors.md")
	require.NoError(t, err)
	rows := regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\|").FindAllSubmatch(doc, -1)
	seen := map[string]int{}
	var documented []string
	for _, r := range rows {
		code := string(r[1])
		seen[code]++
		if seen[code] == 1 {
			documented = append(documented, code)
		}
	}
	for code, n := range seen {
		assert.Equal(t, 1, n, "code %s has %d rows", code, n)
	}
	sort.Strings(documented)
	assert.Equal(t, declaredCodes(t), documented)
}
