// Package queryfile reads the store packages' .sql files: their named statements. Both the query
// sets' generator (querygen) and the check of what it generated (mysql.CheckQueries) read them so.
package queryfile

import "strings"

// Statement is one named statement of a query file.
type Statement struct{ Name, Text string }

// Parse returns the named statements of one file, in its order: a line `-- name: X` starts
// statement X, which is every line after it up to the next such line, less comment lines and blank
// lines, without its final semicolon.
func Parse(file string) []Statement {
	var out []Statement
	name := ""
	var body []string
	flush := func() {
		if name != "" {
			out = append(out, Statement{name, strings.TrimSuffix(strings.TrimSpace(strings.Join(body, "\n")), ";")})
		}
	}
	for _, line := range strings.Split(file, "\n") {
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
	return out
}
