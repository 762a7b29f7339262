package mysqltest_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// The stores' tests of their statements' pruning can fail: the audit reads every partition.
func TestTheAuditReadsEveryPartition(t *testing.T) {
	t.Parallel()
	db := testdb.Core(t, mysql.Config{}, 2)
	got, err := mysqltest.PartitionsOf(context.Background(), db.Pool(), mysqltest.Statement("Audit"))
	require.NoError(t, err)
	require.Equal(t, []string{"failed", "fresh", "open", "queued", "settled"}, got)
}
