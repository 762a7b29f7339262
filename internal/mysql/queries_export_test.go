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

// RuleQueries are CheckRules' reads of information_schema, by what each finds.
func RuleQueries() map[string]string {
	out := map[string]string{}
	for _, c := range ruleChecks {
		out[c.what] = c.query
	}
	return out
}
