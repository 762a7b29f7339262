package agentstore_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
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

// explainPartitions returns the partitions (or subpartitions) EXPLAIN says q reads.
func explainPartitions(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	parts, err := mysqltest.ExplainPartitions(context.Background(), db, q)
	require.NoError(t, err, "EXPLAIN has a partitions column")
	return parts
}
