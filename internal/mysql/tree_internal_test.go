package mysql

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The tests of this file look at every package of internal/mysql at once, the core and its stores:
// their .sql files and their Go.

// treeDirs are the directories of internal/mysql's packages: the core's and its subdirectories'.
func treeDirs(t *testing.T) []string {
	t.Helper()
	dirs := []string{"."}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != "migrations" {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) < 8 {
		t.Fatalf("found the packages %v: the scan is broken", dirs)
	}
	return dirs
}

// treeStatements are the statements of every package's .sql files, by "dir/Name".
func treeStatements(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range treeDirs(t) {
		files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range parseQueries(string(b)) {
				out[dir+"/"+q.name] = q.text
			}
		}
	}
	if len(out) < 150 {
		t.Fatalf("read %d statements: the scan is broken", len(out))
	}
	return out
}

// treeGoFiles are every package's non-test Go files, parsed.
func treeGoFiles(t *testing.T, fset *token.FileSet) []*ast.File {
	t.Helper()
	var out []*ast.File
	for _, dir := range treeDirs(t) {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, f)
		}
	}
	return out
}

// Every statement of every package's .sql files is read by the code: each package reads its files
// into a query set (MustLoadQueries), whose fields the loader matches one for one with the names,
// and every field is read somewhere in the package's Go (queries.X, or &queries.X). A statement left
// in a file after its code went fails here.
func TestEveryQueryIsUsed(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	sets := 0
	for _, dir := range treeDirs(t) {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		var parsed []*ast.File
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, f)
		}
		// The query set: `var queries = ...MustLoadQueries[queryTexts](...)`, and queryTexts' fields.
		var fields []string
		for _, f := range parsed {
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok || ts.Name.Name != "queryTexts" {
					return true
				}
				for _, fl := range ts.Type.(*ast.StructType).Fields.List {
					for _, id := range fl.Names {
						fields = append(fields, id.Name)
					}
				}
				return false
			})
		}
		hasSQL, _ := filepath.Glob(filepath.Join(dir, "*.sql"))
		if len(hasSQL) > 0 && len(fields) == 0 {
			t.Errorf("%s has .sql files and no queryTexts", dir)
			continue
		}
		if len(fields) > 0 {
			sets++
		}
		used := map[string]bool{}
		for _, f := range parsed {
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "queries" {
						used[sel.Sel.Name] = true
					}
				}
				return true
			})
		}
		for _, name := range fields {
			if !used[name] {
				t.Errorf("%s: statement %s is never read (queries.%s)", dir, name, name)
			}
		}
	}
	if sets < 8 {
		t.Fatalf("found %d query sets: the scan is broken", sets)
	}
	// The core's own set is the one it loads: the scan reads what the loader reads.
	if n := reflect.TypeOf(queries).NumField(); n < 30 {
		t.Fatalf("the core's set has %d statements", n)
	}
}

// The claims take no ORDER BY (eventstore's TestClaimsTakeNoOrderBySoConcurrentClaimsSplitTheRows
// says why, and shows what one does): no statement of any package that locks with SKIP LOCKED sorts
// what it locks.
func TestNoSkipLockedStatementSorts(t *testing.T) {
	t.Parallel()
	var claims []string
	for where, q := range treeStatements(t) {
		if !strings.Contains(q, "SKIP LOCKED") {
			continue
		}
		claims = append(claims, where)
		if strings.Contains(strings.ToUpper(q), "ORDER BY") {
			t.Errorf("%s locks with SKIP LOCKED and sorts", where)
		}
	}
	slices.Sort(claims)
	if !slices.Contains(claims, "eventstore/ClaimDue") || !slices.Contains(claims, "eventstore/ClaimIDs") {
		t.Fatalf("the statements with SKIP LOCKED are %v: the processor's claim and the sweeper's are missing", claims)
	}
}
