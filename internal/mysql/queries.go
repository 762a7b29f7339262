package mysql

import (
	"embed"
	"fmt"
	"strings"

	"github.com/exactlyonce/exactlyonce/internal/routing"
)

//go:embed sql/*.sql
var queryFiles embed.FS

// queries maps a query's name (a "-- name: X" line in sql/*.sql) to its text. The SQL lives in those
// files, one per table, with the reason for every lock beside it.
var queries = mustParseQueries()

func mustParseQueries() map[string]string {
	entries, err := queryFiles.ReadDir("sql")
	if err != nil {
		panic(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := queryFiles.ReadFile("sql/" + e.Name())
		if err != nil {
			panic(err)
		}
		name := ""
		var body []string
		flush := func() {
			if name != "" {
				out[name] = strings.TrimSuffix(strings.TrimSpace(strings.Join(body, "\n")), ";")
			}
		}
		for _, line := range strings.Split(string(b), "\n") {
			trimmed := strings.TrimSpace(line)
			if n, ok := strings.CutPrefix(trimmed, "-- name:"); ok {
				flush()
				name, body = strings.TrimSpace(n), nil
				continue
			}
			if strings.HasPrefix(trimmed, "--") || trimmed == "" {
				continue
			}
			body = append(body, line)
		}
		flush()
	}
	return out
}

// query returns the named query; a missing name is a programming error caught by any test.
func query(name string) string {
	q, ok := queries[name]
	if !ok {
		panic(fmt.Sprintf("mysql: no query named %q in sql/*.sql", name))
	}
	return q
}

// expandIDs replaces the /*ids*/ marker with one placeholder per id and returns the ids as arguments.
func expandIDs(q string, ids []int64) (string, []any) {
	return strings.Replace(q, "/*ids*/", placeholders(len(ids)), 1), idArgs(ids)
}

// expandEventRows replaces the /*rows*/ marker with one row per id (a tuple whose two placeholders
// are the event's id and its routing hash), and returns those as arguments.
func expandEventRows(q, row string, ids []int64) (string, []any) {
	rows := strings.TrimSuffix(strings.Repeat(row+", ", len(ids)), ", ")
	args := make([]any, 0, 2*len(ids))
	for _, id := range ids {
		args = append(args, id, routing.EventHash(id))
	}
	return strings.Replace(q, "/*rows*/", rows, 1), args
}

func idArgs(ids []int64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
}

func placeholders(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.Repeat("?, ", n-1) + "?"
}
