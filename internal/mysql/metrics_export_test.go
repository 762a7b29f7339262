package mysql

import "strings"

// QueryText exposes a named statement of sql/*.sql to the external tests that EXPLAIN it.
func QueryText(name string) string { return query(name) }

// ListEventsText is ListEvents's statement for one set, as the store sends it.
func ListEventsText(set string) string {
	return strings.Replace(query("ListEvents"), "/*states*/", listStates[set], 1)
}

// GetPackedText is GetPacked's text for id, as getPacked makes it.
func GetPackedText(id int64) string { return getPackedText(id) }
