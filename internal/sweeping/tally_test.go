package sweeping_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The maintenance derives the events' count base once begin_after has passed, and not before: on a
// database migrated with history (base unknown), the events created before the tally are counted.
func TestMaintenanceDerivesTheTallyBase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	db := store.DB.Pool()
	_, err := store.Events.CreatePendingBatch(ctx, 7)
	require.NoError(t, err)
	// As migration 0018 leaves a database with history: 7 events, none of them in the tally.
	_, err = db.ExecContext(ctx, "UPDATE event_tally SET n = 0")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "UPDATE event_tally_base SET n = NULL, begin_after = NOW(6) + INTERVAL 1 HOUR")
	require.NoError(t, err)
	base := func() sql.NullInt64 {
		var n sql.NullInt64
		require.NoError(t, db.QueryRowContext(ctx, "SELECT n FROM event_tally_base").Scan(&n))
		return n
	}

	sweeper := sweeping.New(store.Sweeping(), sweeping.Config{KeepHistory: true, Logger: quietLogger()})
	_, err = sweeper.Maintain(ctx)
	require.NoError(t, err)
	require.False(t, base().Valid, "not before begin_after")

	_, err = db.ExecContext(ctx, "UPDATE event_tally_base SET begin_after = NOW(6)")
	require.NoError(t, err)
	_, err = sweeper.Maintain(ctx)
	require.NoError(t, err)
	require.Equal(t, sql.NullInt64{Int64: 7, Valid: true}, base(), "the events no create tallied")
	_, err = store.Events.CreatePendingBatch(ctx, 2)
	require.NoError(t, err)
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 9, n)
}
