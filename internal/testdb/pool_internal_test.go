package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// A member a test wrote to is the template's again at its next lease: rows added to empty tables go,
// rows of the seeded tables (the id counter, the buckets, schema_migrations) come back as they were.
func TestResetRestoresTheTemplatesRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := DB(t, 2)
	p, err := getPool()
	require.NoError(t, err)
	l := leaseOf(t, db)

	want := checksums(t, p.admin, p.tpl)
	for _, stmt := range []string{
		"UPDATE status SET id = id + 1000",
		"DELETE FROM counter_buckets WHERE bucket < 100",
		"UPDATE idempotency_buckets SET directory = 'x' WHERE bucket = 7",
		"INSERT INTO agents VALUES (1, 'a', 'sweeper', 'hash', 'active', NULL, NULL, NOW(), NOW(), NOW())",
		"INSERT INTO pack_turn SELECT * FROM pack_turn",
		"DELETE FROM schema_migrations WHERE version = 1",
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	require.NotEqual(t, want, checksums(t, p.admin, l.name), "the test changed the rows")

	start := time.Now()
	require.NoError(t, p.reset(ctx, l.conn, l.name))
	t.Logf("reset took %v", time.Since(start))
	require.Equal(t, want, checksums(t, p.admin, l.name))
}

// A member whose schema a test changed (an index, a column, a trigger, a table more or less) is not
// reused: reset says so, and lease drops it. Each change is undone before the next, on one member.
func TestResetRefusesAChangedSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := getPool()
	require.NoError(t, err)
	db, _ := DB(t, 2)
	l := leaseOf(t, db)
	for _, change := range []struct{ do, undo string }{
		{"CREATE INDEX by_id ON status (id)", "DROP INDEX by_id ON status"},
		{"ALTER TABLE agents ADD COLUMN extra INT", "ALTER TABLE agents DROP COLUMN extra"},
		{"CREATE TRIGGER scratch_trg BEFORE INSERT ON status FOR EACH ROW SET NEW.id = NEW.id", "DROP TRIGGER scratch_trg"},
		{"CREATE PROCEDURE scratch_proc() SELECT 1", "DROP PROCEDURE scratch_proc"},
		{"CREATE TABLE scratch (a INT)", "DROP TABLE scratch"},
		{"CREATE VIEW scratch_view AS SELECT 1 AS one", "DROP VIEW scratch_view"},
		{"RENAME TABLE pack_turn TO pack_turn_gone", "RENAME TABLE pack_turn_gone TO pack_turn"},
	} {
		_, err := db.ExecContext(ctx, change.do)
		require.NoError(t, err, change.do)
		require.ErrorIs(t, p.reset(ctx, l.conn, l.name), errDrift, change.do)
		_, err = l.conn.ExecContext(ctx, "USE "+l.name)
		require.NoError(t, err)
		_, err = l.conn.ExecContext(ctx, change.undo)
		require.NoError(t, err, change.undo)
		_, err = l.conn.ExecContext(ctx, "USE mysql") // off the member: reset kills its connections
		require.NoError(t, err)
	}
	require.NoError(t, p.reset(ctx, l.conn, l.name), "each change undone, the member is the template's again")
}

// What a test leaves connected to its database is disconnected when the test ends, so that it
// cannot write into the next test's.
func TestReleaseEndsTheTestsConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := getPool()
	require.NoError(t, err)
	l, err := p.lease(ctx)
	require.NoError(t, err)
	cfg := p.cfg.Clone()
	cfg.DBName = l.name
	leftover, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	defer leftover.Close()
	conn, err := leftover.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.PingContext(ctx))

	require.NoError(t, l.release(ctx))
	var one int
	err = conn.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	require.Error(t, err, "the leftover connection was killed")
}

// leaseOf finds the lease behind a database DB returned.
func leaseOf(t *testing.T, db *sql.DB) *lease {
	t.Helper()
	p, err := getPool()
	require.NoError(t, err)
	var name string
	require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&name))
	conn, err := p.admin.Conn(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	// The lease's own connection holds the lock; reset needs a connection of its own that is not
	// one of the test's (reset kills those).
	var holder sql.NullInt64
	require.NoError(t, conn.QueryRowContext(context.Background(), "SELECT IS_USED_LOCK(?)", lockName(name)).Scan(&holder))
	require.True(t, holder.Valid, "the database is leased")
	return &lease{name: name, conn: conn}
}

// checksums is every table's CHECKSUM TABLE and row count.
func checksums(t *testing.T, admin *sql.DB, db string) map[string]string {
	t.Helper()
	rows, err := admin.Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", db)
	require.NoError(t, err)
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	rows.Close()
	out := map[string]string{}
	for _, n := range names {
		var ignored string
		var sum sql.NullInt64
		require.NoError(t, admin.QueryRow(fmt.Sprintf("CHECKSUM TABLE %s.`%s`", db, n)).Scan(&ignored, &sum))
		var c int
		require.NoError(t, admin.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM %s.`%s`", db, n)).Scan(&c))
		out[n] = fmt.Sprintf("%d rows, checksum %d", c, sum.Int64)
	}
	return out
}

// On a server whose event scheduler cannot run, information_schema.EVENTS refuses every read (error
// 1577); reset must still compare a member with the template there, and must still see an event a
// test left in a member (then in mysql.event). A private server started under --skip-grant-tables is
// such a server.
func TestReadShapeWithTheEventSchedulerDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := fault.PrivateServer(t)
	require.NoError(t, srv.CreateDatabase(ctx, "member"))
	srv.CheckPrivileges(t,
		"CREATE USER 'admin'@'%' IDENTIFIED BY 'admin-secret'",
		"GRANT ALL PRIVILEGES ON *.* TO 'admin'@'%' WITH GRANT OPTION")
	cfg := drv.NewConfig()
	cfg.User, cfg.Passwd = "admin", "admin-secret"
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", srv.Addr(), "member"
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = conn.ExecContext(ctx, "SELECT EVENT_NAME FROM information_schema.EVENTS")
	require.True(t, isErr(err, errEventSchedulerDisabled), "the server's scheduler cannot run: %v", err)
	_, err = conn.ExecContext(ctx, "CREATE TABLE status (id BIGINT NOT NULL)")
	require.NoError(t, err)

	s, err := readShape(ctx, conn, "member")
	require.NoError(t, err)
	require.Len(t, s.tables, 1)

	_, err = conn.ExecContext(ctx, `INSERT INTO mysql.event (db, name, body, definer, execute_at, created,
		modified, status, on_completion, sql_mode, comment, originator, time_zone, character_set_client,
		collation_connection, db_collation, body_utf8)
		SELECT 'member', 'scratch_event', 'SELECT 1', 'root@localhost', NOW(), NOW(), NOW(), 'DISABLED',
		'DROP', '', '', 1, 'SYSTEM', 'utf8mb4', 'utf8mb4_general_ci', 'utf8mb4_general_ci', 'SELECT 1'`)
	require.NoError(t, err)
	_, err = readShape(ctx, conn, "member")
	require.ErrorContains(t, err, "forbid")
}

// A member whose files a test grew (rows written, then deleted: InnoDB keeps the space) is not
// reused, so that the pool's size does not ratchet up to what its largest tests wrote. 128 MB of
// blobs written and deleted leave it larger than reset allows. (A member as leased is about the
// template's size, but not exactly: the statistics of what an earlier test wrote may come in late.)
func TestResetRefusesAGrownMember(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := getPool()
	require.NoError(t, err)
	db, _ := DB(t, 2)
	l := leaseOf(t, db)
	before, err := size(ctx, l.conn, l.name)
	require.NoError(t, err)

	_, err = db.ExecContext(ctx, `INSERT INTO event_workers (worker_id, agent_id, created_at, tasks_remaining,
		will_terminate, tasks_completed, tasks_failed, max_reference_count, is_done, reference_count, reference_ids,
		first_hash) SELECT seq, 1, NOW(), 0, 0, 0, 0, 0, 0, 0, REPEAT('x', 1 << 20), 0 FROM seq_1_to_128`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "DELETE FROM event_workers")
	require.NoError(t, err)
	// InnoDB's statistics see the new size once the table is recounted: ANALYZE TABLE does it now
	// rather than whenever the background thread gets to it (over a minute on a loaded machine).
	testutil.Eventually(t, 5*time.Minute, "the member's size grown by more than reset allows", func() bool {
		_, err := db.ExecContext(ctx, "ANALYZE TABLE event_workers")
		require.NoError(t, err)
		now, err := size(ctx, l.conn, l.name)
		require.NoError(t, err)
		return now-before > maxGrowth+(16<<20)
	})
	require.ErrorIs(t, p.reset(ctx, l.conn, l.name), errGrown)
}
