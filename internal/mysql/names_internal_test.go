package mysql

import (
	"go/ast"
	"go/token"
	"regexp"
	"strconv"
	"testing"
)

// plainNameComparison finds a comparison of a column that holds a caller's name (a task's
// reference, a counter's user and entity type) written without CAST(... AS BINARY): the columns'
// collation ignores trailing spaces, Go does not, so such a comparison takes two names Go keeps
// apart for one (C). A column followed by " AS BINARY" is cast, and never matches.
var plainNameComparison = regexp.MustCompile(`\b(?:\w+\.)?(reference_id|user_id|entity_type)\s*\)?\s*(=|<>|!=|<=>|\bIN\s*\(|\bLIKE\b)`)

// Every statement of the core's and the stores' .sql files, and every SQL fragment they write in
// Go, compares those columns as bytes.
func TestNamesAreComparedAsBytes(t *testing.T) {
	t.Parallel()
	texts := map[string]string{}
	for where, q := range treeStatements(t) {
		texts[where] = q
	}
	fset := token.NewFileSet()
	for _, f := range treeGoFiles(t, fset) {
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					texts[fset.Position(lit.Pos()).String()] = s
				}
			}
			return true
		})
	}
	if len(texts) < 100 {
		t.Fatalf("read %d texts: the scan is broken", len(texts))
	}
	for where, q := range texts {
		if m := plainNameComparison.FindString(q); m != "" {
			t.Errorf("%s compares %q without CAST(... AS BINARY): %s", where, m, q)
		}
	}
	// The pattern itself: it finds the forms it is meant to find, and passes the cast ones.
	for _, bad := range []string{"reference_id = ?", "s.user_id = ?", "(user_id, entity_type) IN (", "reference_id IN (?)", "entity_type<>?"} {
		if !plainNameComparison.MatchString(bad) {
			t.Errorf("the pattern misses %q", bad)
		}
	}
	for _, good := range []string{"CAST(reference_id AS BINARY) = ?", "(CAST(user_id AS BINARY), CAST(entity_type AS BINARY)) IN (",
		"SELECT entity_type, user_id, sum", "COALESCE(reference_id, '')"} {
		if plainNameComparison.MatchString(good) {
			t.Errorf("the pattern takes %q for a plain comparison", good)
		}
	}
}
