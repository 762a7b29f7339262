package mysql_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/stretchr/testify/require"
)

// A server whose event scheduler cannot run (MariaDB's event_scheduler=DISABLED, or privileges
// turned on at run time after a start under --skip-grant-tables, as the granting test server does)
// answers every read of information_schema.EVENTS with error 1577. The rules check must still run
// there, or no migration can, and must still see an event the database holds: whether events run is
// the scheduler's business; whether one exists is the rules'.
func TestSchemaRulesHoldWithTheEventSchedulerDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := grantingServer(t)
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn("admin", "admin-secret"), MaxOpenConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.ExecContext(ctx, "SELECT EVENT_NAME FROM information_schema.EVENTS")
	require.ErrorContains(t, err, "1577", "the server's scheduler cannot run")

	require.NoError(t, mysql.Migrate(ctx, db), "a migration checks the rules on a server without its scheduler")
	breaches, err := mysql.CheckRules(ctx, db)
	require.NoError(t, err)
	require.Empty(t, breaches)

	// An event the scheduler cannot run is still logic in the database: the check finds it in the
	// server's own table of events (CREATE EVENT is refused too, so the row is written there).
	_, err = db.ExecContext(ctx, `INSERT INTO mysql.event (db, name, body, definer, execute_at, created,
		modified, status, on_completion, sql_mode, comment, originator, time_zone, character_set_client,
		collation_connection, db_collation, body_utf8)
		SELECT DATABASE(), 'scratch_event', 'SELECT 1', 'root@localhost', NOW(), NOW(), NOW(), 'DISABLED',
		'DROP', '', '', 1, 'SYSTEM', 'utf8mb4', 'utf8mb4_general_ci', 'utf8mb4_general_ci', 'SELECT 1'`)
	require.NoError(t, err)
	breaches, err = mysql.CheckRules(ctx, db)
	require.NoError(t, err)
	require.Equal(t, []string{"scheduled event scratch_event"}, breaches)
}
