package mysql

import (
	"strings"
	"testing"
	"testing/fstest"
)

// The loader fills a query set from the files' names, and refuses a set that does not match them
// one for one: a statement with no field, a field with no statement, a name given twice.
func TestLoadQueriesMatchesNamesOneForOne(t *testing.T) {
	t.Parallel()
	type set struct{ First, Second string }
	files := fstest.MapFS{
		"a.sql": {Data: []byte("-- a file's opening comment\n\n-- name: First\n-- why it locks\nSELECT 1\nFROM t;\n")},
		"b.sql": {Data: []byte("-- name: Second\nUPDATE t SET x = ?;\n")},
		"c.txt": {Data: []byte("-- name: NotSQL\nSELECT 2;\n")},
	}
	var got set
	if err := LoadQueries(files, &got); err != nil {
		t.Fatal(err)
	}
	if got.First != "SELECT 1\nFROM t" || got.Second != "UPDATE t SET x = ?" {
		t.Fatalf("loaded %+v", got)
	}

	for _, c := range []struct {
		name  string
		files fstest.MapFS
		into  any
		want  string
	}{
		{"a statement with no field", fstest.MapFS{"a.sql": {Data: []byte("-- name: First\nSELECT 1;\n-- name: Second\nSELECT 2;\n-- name: Third\nSELECT 3;\n")}},
			&set{}, "statement Third has no field"},
		{"a field with no statement", fstest.MapFS{"a.sql": {Data: []byte("-- name: First\nSELECT 1;\n")}},
			&set{}, "no statement named Second"},
		{"a name twice in a file", fstest.MapFS{"a.sql": {Data: []byte("-- name: First\nSELECT 1;\n-- name: First\nSELECT 2;\n-- name: Second\nSELECT 3;\n")}},
			&set{}, "statement First is named twice"},
		{"a name in two files", fstest.MapFS{"a.sql": {Data: []byte("-- name: First\nSELECT 1;\n")},
			"b.sql": {Data: []byte("-- name: First\nSELECT 2;\n-- name: Second\nSELECT 3;\n")}},
			&set{}, "statement First is named twice"},
		{"a field that is not a string", fstest.MapFS{"a.sql": {Data: []byte("-- name: First\nSELECT 1;\n")}},
			&struct{ First int }{}, "field First is not an exported string"},
		{"no pointer", files, set{}, "want a pointer to a struct"},
		{"no file", fstest.MapFS{}, &set{}, "no .sql file"},
	} {
		err := LoadQueries(c.files, c.into)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// queryName finds a statement's name from its field, as the users' grants report a failure.
func TestQueryNameOfAGrant(t *testing.T) {
	t.Parallel()
	if got := queryName(&queries, &queries.GrantPackTurn); got != "GrantPackTurn" {
		t.Fatalf("got %q", got)
	}
	var other string
	if got := queryName(&queries, &other); got != "" {
		t.Fatalf("a string outside the set is named %q", got)
	}
}

// CheckQueries passes a generated set that matches its files and names every field that does not:
// a file edited after the set was generated.
func TestCheckQueriesNamesAStaleField(t *testing.T) {
	t.Parallel()
	type set struct{ First, Second string }
	files := fstest.MapFS{"a.sql": {Data: []byte("-- name: First\nSELECT 1;\n-- name: Second\nSELECT 2;\n")}}
	if err := CheckQueries(files, set{"SELECT 1", "SELECT 2"}); err != nil {
		t.Fatal(err)
	}
	err := CheckQueries(files, set{"SELECT 1", "SELECT 3"})
	if err == nil || !strings.Contains(err.Error(), "in Second: run go generate") {
		t.Fatalf("got %v, want an error naming Second", err)
	}
	err = CheckQueries(fstest.MapFS{"a.sql": {Data: []byte("-- name: First\nSELECT 1;\n")}}, set{"SELECT 1", ""})
	if err == nil || !strings.Contains(err.Error(), "no statement named Second") {
		t.Fatalf("got %v, want an error naming the statement that is missing", err)
	}
}
