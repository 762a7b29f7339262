package mysql

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/exactlyonce/exactlyonce/internal/mysql/queryfile"
)

// LoadQueries fills dst, a pointer to a struct whose fields are all strings, with the statements
// of the .sql files at the root of fsys: a line `-- name: X` starts statement X, which is every line
// after it up to the next such line, less comment lines and blank lines, without its final
// semicolon; field X gets it. It fails, naming them, when a field has no statement, a statement has
// no field, or a name is given twice.
//
// The programs do not call it: a store's query set is Go that querygen writes from the same files
// (go generate), so that starting a process parses nothing, and the package's generated test checks
// that set against what LoadQueries makes of the files (CheckQueries). So a statement is reached
// through its field (a wrong name is a compile error), and a statement with no field, a field with
// no statement, a name given twice or a file edited and not generated again fails a test.
func LoadQueries(fsys fs.FS, dst any) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("load queries: want a pointer to a struct, got %T", dst)
	}
	texts, err := parseQueryFiles(fsys)
	if err != nil {
		return err
	}
	set, typ := v.Elem(), v.Elem().Type()
	var problems []string
	fields := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Type.Kind() != reflect.String || !f.IsExported() {
			problems = append(problems, fmt.Sprintf("field %s is not an exported string", f.Name))
			continue
		}
		fields[f.Name] = true
		text, ok := texts[f.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("no statement named %s", f.Name))
			continue
		}
		set.Field(i).SetString(text)
	}
	for _, name := range slices.Sorted(maps.Keys(texts)) {
		if !fields[name] {
			problems = append(problems, fmt.Sprintf("statement %s has no field in %s", name, typ))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("load queries into %s: %s", typ, strings.Join(problems, "; "))
	}
	return nil
}

// CheckQueries returns an error unless generated, a query set as querygen wrote it, holds what
// LoadQueries makes of the .sql files at the root of fsys: every field the statement of its name,
// as the files say it today. The error names the fields that differ and says to run go generate.
func CheckQueries[T any](fsys fs.FS, generated T) error {
	var want T
	if err := LoadQueries(fsys, &want); err != nil {
		return err
	}
	g, w := reflect.ValueOf(generated), reflect.ValueOf(want)
	var stale []string
	for i := range w.NumField() {
		if g.Field(i).String() != w.Field(i).String() {
			stale = append(stale, w.Type().Field(i).Name)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("the generated %s differs from its .sql files in %s: run go generate in its package",
			w.Type(), strings.Join(stale, ", "))
	}
	return nil
}

// parseQueryFiles reads every .sql file at the root of fsys, by name, and returns its statements by
// name.
func parseQueryFiles(fsys fs.FS) (map[string]string, error) {
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("load queries: no .sql file")
	}
	out := map[string]string{}
	for _, file := range files {
		b, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		for _, q := range queryfile.Parse(string(b)) {
			if _, ok := out[q.Name]; ok {
				return nil, fmt.Errorf("load queries: statement %s is named twice (%s)", q.Name, file)
			}
			out[q.Name] = q.Text
		}
	}
	return out, nil
}

// queryName returns the name of the field of set (a query set LoadQueries filled) that field points
// to; "" if it is none of them.
func queryName(set any, field *string) string {
	v := reflect.ValueOf(set).Elem()
	for i := range v.NumField() {
		if v.Field(i).Addr().Interface() == any(field) {
			return v.Type().Field(i).Name
		}
	}
	return ""
}

// The helpers below write the parts of a statement that depend on its arguments: the IN lists and
// row lists the statements mark with /*ids*/ and the like, which database/sql cannot bind.

// ExpandIDs replaces the /*ids*/ marker of q with one placeholder per id and returns the ids as
// arguments.
func ExpandIDs(q string, ids []int64) (string, []any) {
	return strings.Replace(q, "/*ids*/", Placeholders(len(ids)), 1), IDArgs(ids)
}

// IDArgs returns ids as statement arguments.
func IDArgs(ids []int64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
}

// Placeholders returns n placeholders, comma-separated; NULL for none (an IN list that matches
// nothing).
func Placeholders(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// ScanIDs reads the one-column rows of a query that returns ids (rows and err as QueryContext
// returned them).
func ScanIDs(rows *sql.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Unique returns ids without repeats, in the order of their first appearance.
func Unique(ids []int64) []int64 {
	seen := make(map[int64]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
