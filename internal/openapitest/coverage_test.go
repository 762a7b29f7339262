package openapitest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// notServed are the functions of the tests below that build an api.Server without serving its
// traffic to a test, each with the reason.
var notServed = map[string]string{
	"internal/api/router_test.go TestTheDocTableListsTheRoutes":                   "reads the routes registered, serves nothing",
	"internal/api/router_test.go TestTheOpenAPIDocumentListsTheRoutes":            "reads the routes registered, serves nothing",
	"internal/local/local.go Start":                                               "the product's runner, not a test: its tests pass Options.WrapAPI (checked below)",
	"internal/e2e/main_test.go runChild":                                          "a child process's API: the tests reach it through openapitest.Transport",
	"internal/api/group_test.go TestAsyncGroupThatCannotBeStoredFailsEachRequest": "drives the async groups in-process: no HTTP exchange",
	"internal/api/group_test.go TestKeyedGroupsAreBoundedByBytes":                 "drives the keyed groups in-process: no HTTP exchange",
	"internal/api/outbox_test.go TestOutboxSendsAFullMessageAtOnce":               "drives the outbox in-process: no HTTP exchange",
	"internal/api/outbox_test.go TestOutboxSendsALoneIDAfterLinger":               "drives the outbox in-process: no HTTP exchange",
	"internal/api/outbox_test.go TestOutboxLeavesWhatItCannotHoldToTheSweeper":    "drives the outbox in-process: no HTTP exchange",
}

// Every test of the API, the end-to-end tests, the local runner's, the console's and the client's that builds the
// API's handler (an api.Server, or the local runner) checks its traffic: the function that builds
// it, or a helper of its package it calls, uses openapitest (local.Start's options set WrapAPI).
// So a new test cannot talk to the API unchecked by forgetting to.
func TestEveryTestOfTheAPIChecksItsTraffic(t *testing.T) {
	root := "../.."
	for _, dir := range []string{"internal/api", "internal/e2e", "internal/console", "internal/local", "client"} {
		pkgs := map[string][]*ast.File{} // by directory
		names := map[*ast.File]string{}
		fset := token.NewFileSet()
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			names[f] = filepath.ToSlash(rel)
			pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, files := range pkgs {
			// The package's functions that use openapitest: calling one counts as checking.
			checking := map[string]bool{}
			for _, f := range files {
				for _, d := range f.Decls {
					if fn, ok := d.(*ast.FuncDecl); ok && uses(fn, "openapitest") {
						checking[fn.Name.Name] = true
					}
				}
			}
			for _, f := range files {
				inAPI := f.Name.Name == "api"
				for _, d := range f.Decls {
					fn, ok := d.(*ast.FuncDecl)
					if !ok || fn.Body == nil {
						continue
					}
					where := names[f] + " " + fn.Name.Name
					builds, wraps := false, uses(fn, "openapitest")
					ast.Inspect(fn.Body, func(n ast.Node) bool {
						switch n := n.(type) {
						case *ast.CompositeLit:
							if isServer(n.Type, inAPI) {
								builds = true
							}
							if sel, ok := n.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Options" && isIdent(sel.X, "local") && !hasKey(n, "WrapAPI") {
								t.Errorf("%s: local.Options without WrapAPI: the local runner's API traffic goes unchecked", where)
							}
						case *ast.CallExpr:
							if id, ok := n.Fun.(*ast.Ident); ok && checking[id.Name] {
								wraps = true
							}
						}
						return true
					})
					if builds && !wraps && notServed[where] == "" {
						t.Errorf("%s builds an api.Server and does not check its traffic with openapitest", where)
					}
				}
			}
		}
	}
}

func uses(fn *ast.FuncDecl, pkg string) bool {
	found := false
	ast.Inspect(fn, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && isIdent(sel.X, pkg) {
			found = true
		}
		return !found
	})
	return found
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func isServer(e ast.Expr, inAPI bool) bool {
	if sel, ok := e.(*ast.SelectorExpr); ok {
		return isIdent(sel.X, "api") && sel.Sel.Name == "Server"
	}
	return inAPI && isIdent(e, "Server")
}

func hasKey(lit *ast.CompositeLit, key string) bool {
	for _, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok && isIdent(kv.Key, key) {
			return true
		}
	}
	return false
}
