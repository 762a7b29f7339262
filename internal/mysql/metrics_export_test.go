package mysql

// QueryText exposes a named statement of sql/*.sql to the external tests that EXPLAIN it.
func QueryText(name string) string { return query(name) }
