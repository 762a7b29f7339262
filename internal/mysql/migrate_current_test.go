package mysql_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// currentMigrateBytes bounds what Migrate allocates on a current schema: its one query through the
// driver, a few KB. Reading and splitting every embedded migration, which it does not need to see
// that the schema is current, was 170 KB and 0.2-0.4 ms.
const currentMigrateBytes = 64 << 10

// Invariant: on a current schema, Migrate is one statement (one round trip: the migrations applied,
// the counter's row and settled_count's row read together; it was three) and reads no migration
// file. Every process makes it at start-up (DB_MIGRATE, the default), a Lambda's cold start among
// them (docs/performance.md, "Lambda start-up"). Not parallel: the bytes are the process's, read
// while no other test of the package runs.
func TestMigrateOnACurrentSchemaIsOneStatement(t *testing.T) {
	ctx := context.Background()
	_, dsn := testdb.DB(t, 1)
	db, tally := mysqltest.TalliedDB(t, dsn, 1, "")
	require.NoError(t, db.PingContext(ctx)) // the connection, before counting
	before := tally.Statements()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	require.NoError(t, mysql.Migrate(ctx, db))
	runtime.ReadMemStats(&m1)
	require.EqualValues(t, 1, tally.Statements()-before, "statements of Migrate on a current schema")
	require.Less(t, m1.TotalAlloc-m0.TotalAlloc, uint64(currentMigrateBytes), "bytes Migrate allocates on a current schema")
}
