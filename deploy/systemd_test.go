package deploy_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unit is a systemd unit: section, key, values in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T) unit {
	t.Helper()
	f, err := os.Open(unitFile)
	require.NoError(t, err)
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "not key=value: %q", line)
			require.NotEmpty(t, section, "%q before any section", line)
			u[section][k] = append(u[section][k], v)
		}
	}
	require.NoError(t, sc.Err())
	return u
}

// flagValue returns the value of --name in a command line, "" if absent.
func flagValue(cmdline, name string) string {
	f := strings.Fields(cmdline)
	for i, w := range f {
		if v, ok := strings.CutPrefix(w, "--"+name+"="); ok {
			return v
		}
		if w == "--"+name && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}

// cliSource parses the airlock command's sources (without tests).
func cliSource(t *testing.T) []*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(root, "cmd", "airlock", "*.go"))
	require.NoError(t, err)
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files)
	return files
}

var pflagDef = regexp.MustCompile(`^(Bool|String|Int|Int64|Uint|Uint64|Float64|Duration|StringSlice|StringArray|StringToString|IntSlice)(Var)?P?$`)

// cliFlags returns the name of every flag the airlock command defines:
// the first string literal of every pflag definition call.
func cliFlags(files []*ast.File) map[string]bool {
	out := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !pflagDef.MatchString(sel.Sel.Name) {
				return true
			}
			for _, a := range call.Args {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					name, _ := strconv.Unquote(lit.Value)
					out[name] = true
					break
				}
			}
			return true
		})
	}
	return out
}

// cliConst returns the value of an integer constant of the airlock
// command.
func cliConst(t *testing.T, files []*ast.File, name string) int {
	t.Helper()
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if id.Name != name || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					require.True(t, ok && lit.Kind == token.INT, "%s is not an integer literal", name)
					v, err := strconv.Atoi(lit.Value)
					require.NoError(t, err)
					return v
				}
			}
		}
	}
	t.Fatalf("cmd/airlock declares no constant %s", name)
	return 0
}

func TestSystemdUnit(t *testing.T) {
	u := parseUnit(t)
	svc := u["Service"]
	require.NotNil(t, svc, "no [Service]")
	require.NotNil(t, u["Install"], "no [Install]")
	one := func(k string) string {
		t.Helper()
		require.Len(t, svc[k], 1, k)
		return svc[k][0]
	}
	assert.Equal(t, "airlock", one("User"))
	assert.Equal(t, "airlock", one("StateDirectory"))
	assert.Equal(t, "on-failure", one("Restart"))
	assert.Equal(t, "yes", one("NoNewPrivileges"))
	assert.Equal(t, "strict", one("ProtectSystem"))

	// No restart after the audit gate refused to start, nor after a usage
	// error: the exit codes of cmd/airlock.
	files := cliSource(t)
	prevent := strings.Fields(one("RestartPreventExitStatus"))
	assert.Contains(t, prevent, strconv.Itoa(cliConst(t, files, "exitAudit")))
	assert.Contains(t, prevent, strconv.Itoa(cliConst(t, files, "exitUsage")))

	// serve, with flags the command defines.
	exec := one("ExecStart")
	args := strings.Fields(exec)
	require.GreaterOrEqual(t, len(args), 2)
	assert.True(t, filepath.IsAbs(args[0]), args[0])
	assert.Equal(t, "serve", args[1])
	assert.Equal(t, "/var/lib/airlock", flagValue(exec, "data"))
	assert.Equal(t, "127.0.0.1:9090", flagValue(exec, "metrics"))
	defined := cliFlags(files)
	for _, a := range args[2:] {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			assert.True(t, defined[name], "ExecStart: cmd/airlock defines no flag --%s", name)
		}
	}

	// Reload is SIGHUP, which serve handles.
	assert.Equal(t, "/bin/kill -HUP $MAINPID", one("ExecReload"))
	serve, err := os.ReadFile(filepath.Join(root, "cmd", "airlock", "serve.go"))
	require.NoError(t, err)
	assert.Contains(t, string(serve), "syscall.SIGHUP")
}
