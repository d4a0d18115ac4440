package layering_test

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/airlock-dev/airlock/"

// Public are the packages a user of Airlock imports (docs/architecture.md):
// the event catalog, the client, the executor interface with its
// conformance suite, and the remote tool protocol.
var Public = []string{"events", "producers", "consumers/executor", "consumers/executor/conformance", "consumers/tools/remote"}

// testSupport are the packages only tests import: product code (any
// package's non-test files) imports none of them.
var testSupport = []string{"internal/testenv", "cmd/airlock/internal/apptest", "cmd/airlock/internal/testexec"}

// imports lists each package of the module with the module packages its
// product code (not its tests) imports.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	require.NoError(t, err)
	m := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(f[0], module)
		m[pkg] = nil
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				m[pkg] = append(m[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	require.NotEmpty(t, m)
	return m
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	return dir
}

func layer(pkg string) string {
	switch {
	case pkg == "events":
		return "events"
	case strings.HasPrefix(pkg, "internal/"):
		return "internal"
	case strings.HasPrefix(pkg, "consumers/"), pkg == "producers":
		return "services"
	}
	return "binaries"
}

// Every arrow points down: events imports nothing of the module; an
// internal leaf library imports only events and other internal leaves;
// services and the client import no binary; nothing imports a binary but
// the binary's own packages (cmd/airlock/internal/..., where the process
// is assembled); no product code imports test support.
func TestImportsPointDown(t *testing.T) {
	rank := map[string]int{"events": 0, "internal": 1, "services": 2, "binaries": 3}
	for pkg, imps := range imports(t) {
		for _, imp := range imps {
			from, to := layer(pkg), layer(imp)
			assert.LessOrEqual(t, rank[to], rank[from], "%s (%s) imports %s (%s): an arrow pointing up", pkg, from, imp, to)
			if strings.HasPrefix(pkg, "consumers/") && imp == "producers" {
				t.Errorf("%s imports the client: services talk through streams", pkg)
			}
			if slices.Contains(testSupport, imp) && !slices.Contains(testSupport, pkg) {
				t.Errorf("%s imports %s, which is test support", pkg, imp)
			}
			if from == "binaries" && to == "binaries" && !strings.HasPrefix(imp, binaryOf(pkg)+"/internal/") {
				t.Errorf("%s imports %s: a binary imports only its own packages", pkg, imp)
			}
		}
	}
}

// binaryOf is the cmd/NAME a package of a binary belongs to, or pkg.
func binaryOf(pkg string) string {
	if rest, ok := strings.CutPrefix(pkg, "cmd/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		return "cmd/" + name
	}
	return pkg
}

// No exported declaration of a public package names a type of an internal
// package: a module outside this one could not name it, so it could not
// implement the interface or fill in the field.
func TestPublicAPINamesNoInternalType(t *testing.T) {
	for _, pkg := range Public {
		dir := filepath.Join(root(t), filepath.FromSlash(pkg))
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		require.NoError(t, err, pkg)
		require.NotEmpty(t, pkgs, pkg)
		for _, p := range pkgs {
			for name, f := range p.Files {
				internal := map[string]string{}
				for _, im := range f.Imports {
					path, _ := strconv.Unquote(im.Path.Value)
					if strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") {
						local := path[strings.LastIndexByte(path, '/')+1:]
						if im.Name != nil {
							local = im.Name.Name
						}
						internal[local] = path
					}
				}
				if len(internal) == 0 {
					continue
				}
				for _, bad := range exportedInternal(f, internal) {
					t.Errorf("%s: %s names %s", fset.Position(bad.pos), filepath.Base(name), bad.what)
				}
			}
		}
	}
}

type finding struct {
	pos  token.Pos
	what string
}

// exportedInternal finds the selectors of internal packages in f's
// exported declarations: function and method signatures, types (their
// fields and methods, exported ones), variables and constants.
func exportedInternal(f *ast.File, internal map[string]string) []finding {
	var out []finding
	scan := func(n ast.Node) {
		if n == nil {
			return
		}
		ast.Inspect(n, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok {
					if path, ok := internal[id.Name]; ok {
						out = append(out, finding{sel.Pos(), path + "." + sel.Sel.Name})
					}
				}
			}
			return true
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
				continue
			}
			scan(d.Type)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						scanType(s.Type, scan)
					}
				case *ast.ValueSpec:
					if slices.ContainsFunc(s.Names, func(n *ast.Ident) bool { return n.IsExported() }) {
						scan(s.Type)
					}
				}
			}
		}
	}
	return out
}

// scanType scans a type's exported parts: all of it but a struct's
// unexported fields and an interface's unexported methods.
func scanType(e ast.Expr, scan func(ast.Node)) {
	switch e := e.(type) {
	case *ast.StructType:
		for _, f := range e.Fields.List {
			if len(f.Names) == 0 || slices.ContainsFunc(f.Names, func(n *ast.Ident) bool { return n.IsExported() }) {
				scan(f.Type)
			}
		}
	case *ast.InterfaceType:
		for _, m := range e.Methods.List {
			if len(m.Names) == 0 || m.Names[0].IsExported() {
				scan(m.Type)
			}
		}
	default:
		scan(e)
	}
}

func exportedRecv(r *ast.FieldList) bool {
	t := r.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}

// examples/ is a module of its own: an executor (with Airlock's
// conformance suite run against it) and a client. Go refuses another
// module's internal packages, so it builds only against the public ones.
func TestExamplesBuildOutsideTheModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds another module")
	}
	dir := filepath.Join(root(t), "examples")
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s in examples/:\n%s", strings.Join(args, " "), out)
	}
}

// Every package says what it is in a doc.go.
func TestEveryPackageHasADocGo(t *testing.T) {
	for pkg := range imports(t) {
		dir := filepath.Join(root(t), filepath.FromSlash(pkg))
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "doc.go"), nil, parser.PackageClauseOnly|parser.ParseComments)
		if !assert.NoError(t, err, "%s has no doc.go", pkg) {
			continue
		}
		assert.NotNil(t, f.Doc, "%s/doc.go has no package comment", pkg)
	}
}

// Defaults are applied in one place and checked in another: no Validate
// method of a Config assigns to its receiver.
func TestValidateChangesNothing(t *testing.T) {
	for pkg := range imports(t) {
		dir := filepath.Join(root(t), filepath.FromSlash(pkg))
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		require.NoError(t, err, pkg)
		for _, p := range pkgs {
			for _, f := range p.Files {
				for _, d := range f.Decls {
					fn, ok := d.(*ast.FuncDecl)
					if !ok || fn.Name.Name != "Validate" || fn.Recv == nil || len(fn.Recv.List[0].Names) == 0 || !isConfig(fn.Recv.List[0].Type) {
						continue
					}
					recv := fn.Recv.List[0].Names[0].Name
					ast.Inspect(fn.Body, func(n ast.Node) bool {
						as, ok := n.(*ast.AssignStmt)
						if !ok {
							return true
						}
						for _, lhs := range as.Lhs {
							if sel, ok := lhs.(*ast.SelectorExpr); ok {
								if id, ok := sel.X.(*ast.Ident); ok && id.Name == recv {
									t.Errorf("%s: Validate sets %s.%s: defaults belong in EnsureDefaults", fset.Position(as.Pos()), recv, sel.Sel.Name)
								}
							}
						}
						return true
					})
				}
			}
		}
	}
}

func isConfig(t ast.Expr) bool {
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	id, ok := t.(*ast.Ident)
	return ok && strings.HasSuffix(id.Name, "Config")
}
