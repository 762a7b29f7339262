package mysql

// Queries exposes the core's statements to its external tests, which EXPLAIN them.
var Queries = queries

// RuleQueries are CheckRules' reads of information_schema, by what each finds.
func RuleQueries() map[string]string {
	out := map[string]string{}
	for _, c := range ruleChecks {
		out[c.what] = c.query
	}
	return out
}
