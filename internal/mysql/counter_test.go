package mysql_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The counter row lost in a database that holds events: migrating again re-creates it above every
// id in use (and above what a running process may still hold, CounterSeedGap), never at 0, which
// would hand out ids that exist.
func TestMigrateReseedsALostCounterAboveTheLargestID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdb.DB(t, 2)
	store, err := wire.StoresOn(db, mysql.Config{Allocator: mysql.AllocatorLiteral})
	require.NoError(t, err)
	var largest int64
	for range 5 {
		e, err := store.Events.CreateProcessed(ctx, "before")
		require.NoError(t, err)
		largest = max(largest, e.ID)
	}
	// A larger id than the counter ever gave, as a bulk load or a restore could leave.
	_, err = db.ExecContext(ctx, "INSERT INTO events (id, value, state, created_at) VALUES (1000, NULL, 0, NOW(6))")
	require.NoError(t, err)
	largest = 1000

	_, err = db.ExecContext(ctx, "DELETE FROM status")
	require.NoError(t, err)
	require.NoError(t, mysql.Migrate(ctx, db))

	var rows int
	var counter int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(MAX(id), -1) FROM status").Scan(&rows, &counter))
	require.Equal(t, 1, rows, "the counter row is back")
	require.Equal(t, largest+mysql.CounterSeedGap, counter, "seeded above the largest id, with the gap")

	e, err := store.Events.CreateProcessed(ctx, "after")
	require.NoError(t, err)
	require.Greater(t, e.ID, largest, "a new event never reuses an id")

	// And once seeded, migrating again leaves the counter alone.
	require.NoError(t, mysql.Migrate(ctx, db))
	var again int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT id FROM status").Scan(&again))
	require.Equal(t, e.ID, again)
}

// Two counter rows would let two writers take the same ids: Migrate refuses, and says what to do.
func TestMigrateRefusesTwoCounterRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdb.DB(t, 2)
	_, err := db.ExecContext(ctx, "INSERT INTO status (id) VALUES (7)")
	require.NoError(t, err)

	err = mysql.Migrate(ctx, db)
	require.Error(t, err)
	for _, want := range []string{"status", "2 rows", "exactly one", "DELETE FROM status"} {
		require.Contains(t, err.Error(), want)
	}
	var rows int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM status").Scan(&rows))
	require.Equal(t, 2, rows, "nothing was changed")
}

// A migration missing below the newest one recorded (a database migrated on a branch whose
// migrations skipped a number, then upgraded to code that fills it) is applied: Migrate must not
// take "the newest is recorded" for "all are".
func TestMigrateAppliesAMigrationMissingBelowTheNewest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdb.DB(t, 2)
	// Undo 0004 and forget it was applied, leaving the newer ones recorded.
	_, err := db.ExecContext(ctx, "ALTER TABLE events DROP COLUMN attempts, DROP COLUMN last_error, DROP COLUMN next_attempt_at")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "DELETE FROM schema_migrations WHERE version = 4")
	require.NoError(t, err)

	require.NoError(t, mysql.Migrate(ctx, db))
	var columns int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'events' AND COLUMN_NAME IN ('attempts', 'last_error', 'next_attempt_at')`).Scan(&columns))
	require.Equal(t, 3, columns, "0004 was applied again")
	var recorded int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = 4").Scan(&recorded))
	require.Equal(t, 1, recorded)
}
