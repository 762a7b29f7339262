package taskstore_test

import (
	"database/sql"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The stores' tests share these helpers (mysqltest/process.go).
var (
	fixedValue = mysqltest.FixedValue
	fixedWorks = mysqltest.FixedWorks
	processIDs = mysqltest.ProcessIDs
	processDue = mysqltest.ProcessDue
	together   = mysqltest.Together
)

// storesOn returns new stores on db (as a process starting on that database builds them).
func storesOn(t *testing.T, db *sql.DB) *wire.Stores {
	t.Helper()
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	return store
}

// dbWithStores leases a test database of up to conns connections and returns it with its stores.
func dbWithStores(t *testing.T, conns int) (*sql.DB, *wire.Stores) {
	t.Helper()
	db, _ := testdb.DB(t, conns)
	return db, storesOn(t, db)
}
