package mysql_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The count's row lost: migrating re-creates it from the counted events, so the count stays exact.
// Two rows: Migrate refuses and says what to do.
func TestMigrateChecksTheSettledCountRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	db := store.DB.Pool()
	for range 4 {
		_, err := store.Events.CreateProcessed(ctx, "v")
		require.NoError(t, err)
	}
	moved, err := store.Events.FoldSettled(ctx, 3)
	require.NoError(t, err)
	require.EqualValues(t, 3, moved)

	_, err = db.ExecContext(ctx, "DELETE FROM settled_count")
	require.NoError(t, err)
	_, err = store.Events.Count(ctx)
	require.Error(t, err, "no row: the count cannot be answered")
	_, err = store.Events.FoldSettled(ctx, 10)
	require.Error(t, err, "no row: a fold must not move rows it cannot count")
	require.NoError(t, mysql.Migrate(ctx, db))
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, n, "re-created from the counted events")

	_, err = db.ExecContext(ctx, "INSERT INTO settled_count (n) VALUES (0)")
	require.NoError(t, err)
	err = mysql.Migrate(ctx, db)
	require.Error(t, err)
	for _, want := range []string{"settled_count", "2 rows", "exactly one", "DELETE FROM settled_count"} {
		require.Contains(t, err.Error(), want)
	}
}
