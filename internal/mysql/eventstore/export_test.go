package eventstore

import (
	"reflect"
	"strings"
)

// Queries exposes the store's statements to its external tests, which EXPLAIN them.
var Queries = queries

// ListEventsText is ListEvents's statement for one set, as the store sends it.
func ListEventsText(set string) string {
	return strings.Replace(queries.ListEvents, "/*states*/", listStates[set], 1)
}

// QueryText is the statement name of the store's files, ClaimDue's over every subpartition of
// `open` (as an idle claimer sends it); it panics for a name they do not have.
func QueryText(name string) string {
	f := reflect.ValueOf(queries).FieldByName(name)
	if !f.IsValid() {
		panic("no statement named " + name)
	}
	if name == "ClaimDue" {
		return claimDueFrom[0]
	}
	return f.String()
}

// OpenSubpartitions is the number of subpartitions of `open` the store names.
const OpenSubpartitions = openSubpartitions

// ClaimDueTexts are ClaimDue's statements of a claim that starts at the i-th subpartition of
// `open`: over it and those after it, and over those before it ("" for none).
func ClaimDueTexts(i int) (from, before string) { return claimDueFrom[i], claimDueBefore[i] }

// SetClaimFrom makes s's next ClaimDue start as after a full claim (full) with its rotation at
// next, or as after a short one.
func SetClaimFrom(s *Store, full bool, next uint32) {
	s.dueFull.Store(full)
	s.dueNext.Store(next)
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
