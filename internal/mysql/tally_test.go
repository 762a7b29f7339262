package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Migration 0018 on a new database: the tally's base is 0 at once. On a database with events: the
// base is unknown until 15 minutes after the migration (the previous version's API may still be
// creating events it does not tally), and the count meanwhile is by the scan, exact.
func TestTallyMigrationWaitsOnlyWithHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	db := store.DB.Pool()
	var base sql.NullInt64
	var after sql.NullTime
	require.NoError(t, db.QueryRowContext(ctx, "SELECT n, begin_after FROM event_tally_base").Scan(&base, &after))
	require.Equal(t, sql.NullInt64{Valid: true}, base, "a new database: nothing to wait for")
	require.False(t, after.Valid)

	// Events created by the version before 0018, which had no tally: undo 0018 and apply it again.
	_, err := store.Events.CreatePendingBatch(ctx, 5)
	require.NoError(t, err)
	_, err = store.Events.CreateProcessed(ctx, "v")
	require.NoError(t, err)
	for _, q := range []string{"DROP TABLE event_tally", "DROP TABLE event_tally_base", "DELETE FROM schema_migrations WHERE version = 18"} {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	require.NoError(t, mysql.Migrate(ctx, db))
	var wait float64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT n, TIMESTAMPDIFF(SECOND, NOW(6), begin_after) FROM event_tally_base").Scan(&base, &wait))
	require.False(t, base.Valid, "with history, the base is derived later")
	require.InDelta(t, (15 * time.Minute).Seconds(), wait, 60)
	var sum int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT SUM(n) FROM event_tally").Scan(&sum))
	require.Zero(t, sum)

	_, err = store.Events.CreatePendingBatch(ctx, 2)
	require.NoError(t, err)
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 8, n, "by the scan, the untallied events included")
}
