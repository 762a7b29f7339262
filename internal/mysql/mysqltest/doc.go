// Package mysqltest is for tests, `make bench` and `make chaos` only: what they need of the
// database that the product never does. Seeding loads millions of rows in bulk, as the stores would
// have written them (seed.go, seed_pages.go, counters_seed.go, keys_seed.go); the audit reads every
// event, the packed history's included, for the exactly-once checker (audit.go, internal/verify);
// StatementTally counts the statements a path sends (tally.go); WaitsForALock tells a test that
// forces an interleaving that a call waits for the lock the test holds (lockwait.go); LeaseAll and
// SettleAll decide for a claim taken without the engine (claim.go); and the helpers read what the
// server plans and holds (EXPLAIN's partitions, InnoDB's purge backlog).
//
// Nothing in the product imports it: TestNoProductImportsMysqltest fails if a command or function
// carries it. Its statements are in its own .sql files, read into a typed set as the stores' are;
// those that copy a store's statement are checked against it by that store's tests (Statement).
package mysqltest

import (
	"reflect"
)

// queryTexts are mysqltest's statements: the audit's (audit.sql) and the seeding's (seed.sql).
type queryTexts struct {
	Audit, AuditPages, PageRowCounts, AuditHighPage string

	LoadPages, LoadArchive, LoadCounterFacts, LoadCounterSums, LoadCounterDirectory, ForgetDirectory, ForgetDirectoryLog, BackfillNotBegun,
	FillDirectoryCell, LoadAttempts string
}

//go:generate go run github.com/exactlyonce/exactlyonce/internal/mysql/querygen queries=queryTexts:*.sql

// Statement returns the text of mysqltest's statement name (audit.sql, seed.sql), for the stores'
// tests that check a copy against their own; "" for an unknown name.
func Statement(name string) string {
	f := reflect.ValueOf(queries).FieldByName(name)
	if !f.IsValid() {
		return ""
	}
	return f.String()
}
