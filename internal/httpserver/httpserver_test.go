package httpserver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every HTTP server the module starts is made by New, so that it has the project's timeouts: no
// http.Server literal and no http.ListenAndServe or http.Serve (which make a server with none) in
// the module's code outside this package. Tests are not servers the project starts. The module's
// nested modules (tools/sqslocal, infra) cannot import this package: sqslocal sets the same
// timeouts itself.
func TestEveryServerIsMadeByNew(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module's root %s: %v", root, err)
	}
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "cdk.out" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if filepath.Dir(rel) == filepath.Join("internal", "httpserver") {
			return nil
		}
		for _, where := range servers(t, path) {
			found = append(found, rel+":"+where)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: an HTTP server not made by httpserver.New (it lacks the project's timeouts)", f)
	}
}

// servers returns where the file at path makes an http.Server or serves without one: the line and
// what it is.
func servers(t *testing.T, path string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	name := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "net/http" {
			name = "http"
			if imp.Name != nil {
				name = imp.Name.Name
			}
		}
	}
	if name == "" {
		return nil
	}
	isHTTP := func(e ast.Expr, sel ...string) bool {
		s, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := s.X.(*ast.Ident)
		if !ok || x.Name != name {
			return false
		}
		for _, want := range sel {
			if s.Sel.Name == want {
				return true
			}
		}
		return false
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if isHTTP(n.Type, "Server") {
				out = append(out, strconv.Itoa(fset.Position(n.Pos()).Line)+": an http.Server literal")
			}
		case *ast.CallExpr:
			if isHTTP(n.Fun, "ListenAndServe", "ListenAndServeTLS", "Serve", "ServeTLS") {
				out = append(out, strconv.Itoa(fset.Position(n.Pos()).Line)+": "+name+"."+n.Fun.(*ast.SelectorExpr).Sel.Name)
			}
		}
		return true
	})
	return out
}
