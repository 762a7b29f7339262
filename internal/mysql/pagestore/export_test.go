package pagestore

import "reflect"

// Queries exposes the store's statements to its external tests, which EXPLAIN them.
var Queries = queries

// PackRowBytes is the most bytes of events one page row holds of a unit.
const PackRowBytes = packRowBytes

// GetPackedText is GetPacked's text for id, as GetPacked makes it.
func GetPackedText(id int64) string { return getPackedText(id) }

// QueryText is the statement name of the store's files; it panics for a name they do not have.
func QueryText(name string) string {
	f := reflect.ValueOf(queries).FieldByName(name)
	if !f.IsValid() {
		panic("no statement named " + name)
	}
	return f.String()
}

// QueryNames are the names of the store's statements.
func QueryNames() []string {
	t := reflect.TypeOf(queries)
	out := make([]string, t.NumField())
	for i := range out {
		out[i] = t.Field(i).Name
	}
	return out
}

// ArchiveQueries exposes the move's statements (archive.sql) to the external tests.
var ArchiveQueries = archiveQueries

// WithMaxPageBytes returns a Store like s whose move leaves a page of more than n bytes of columns
// in the database (archiveMaxPageBytes, 32 MiB, in the product).
func (s *Store) WithMaxPageBytes(n int64) *Store {
	c := *s
	c.maxPageBytes = n
	return &c
}
