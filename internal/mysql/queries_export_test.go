package mysql

import "sort"

// QueryNames lists every named statement of sql/*.sql, sorted.
func QueryNames() []string {
	out := make([]string, 0, len(queries))
	for name := range queries {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
