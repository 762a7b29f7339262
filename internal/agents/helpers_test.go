package agents_test

import (
	"database/sql"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/testdb"
)

func testdbDB(t *testing.T) (*sql.DB, string) { return testdb.DB(t, 8) }
