package testdb_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// A leased database is what a fresh migration leaves: the same database options, the same tables,
// each with the same SHOW CREATE TABLE (columns, engine, partitioning), the same rows, and nothing
// else (no trigger, routine, event, view); and it migrates as current. The fresh one is migrated
// here by mysql.Migrate on an empty database, as every test's database was before the pool.
func TestLeasedDatabaseIsAFreshMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	leased, _ := testdb.DB(t, 2)
	fresh, err := mysql.Open(mysql.ConnConfig{DSN: testdb.NewDatabase(t), MaxOpenConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { fresh.Close() })
	require.NoError(t, mysql.Migrate(ctx, fresh))

	want, got := describe(t, fresh), describe(t, leased)
	require.NotEmpty(t, want.tables)
	require.Contains(t, want.create["events"], "PARTITION BY RANGE", "the events table is partitioned")
	require.Equal(t, want.database, got.database)
	require.Equal(t, want.tables, got.tables)
	for _, name := range want.tables {
		require.Equal(t, want.create[name], got.create[name], "SHOW CREATE TABLE %s", name)
		require.Equal(t, want.rows[name], got.rows[name], "the rows of %s", name)
	}
	require.Equal(t, want.other, got.other)
	require.Len(t, want.archiveID, 36, "a fresh migration's archive identity")
	require.Len(t, got.archiveID, 36, "a leased database's archive identity")
	other, _ := testdb.DB(t, 2)
	require.NotEqual(t, got.archiveID, column(t, other, "SELECT archive_id FROM history_archive"),
		"two leased databases have archive identities of their own, as two fresh migrations have")

	violations, err := mysql.CheckRules(ctx, leased)
	require.NoError(t, err)
	require.Empty(t, violations)
	require.NoError(t, mysql.Migrate(ctx, leased), "a leased database is migrated")
}

type description struct {
	database string
	tables   []string
	create   map[string]string
	rows     map[string]string
	other    []string
	// archiveID is history_archive.archive_id, each database's own.
	archiveID string
}

// describe reads a database's options, tables, their definitions, their rows (as a checksum and a
// count; schema_migrations as its versions, since applied_at is when each ran) and the objects
// SHOW TABLES does not list.
func describe(t *testing.T, db *sql.DB) description {
	t.Helper()
	ctx := context.Background()
	d := description{create: map[string]string{}, rows: map[string]string{}}
	var name string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name))
	var ignored string
	require.NoError(t, db.QueryRowContext(ctx, "SHOW CREATE DATABASE "+name).Scan(&ignored, &d.database))
	d.database = strings.Replace(d.database, "`"+name+"`", "`?`", 1)
	d.tables = strings.Fields(column(t, db, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME"))
	for _, tb := range d.tables {
		var c string
		require.NoError(t, db.QueryRowContext(ctx, "SHOW CREATE TABLE `"+tb+"`").Scan(&ignored, &c))
		d.create[tb] = c
		if tb == "schema_migrations" {
			d.rows[tb] = column(t, db, "SELECT version FROM schema_migrations ORDER BY version")
			continue
		}
		if tb == "history_archive" {
			// Its archive_id is each database's own (a UUID): compared apart, the rest as rows.
			d.archiveID = column(t, db, "SELECT archive_id FROM history_archive")
			cols := column(t, db, "SELECT GROUP_CONCAT(CONCAT('`', COLUMN_NAME, '`') ORDER BY ORDINAL_POSITION) FROM information_schema.COLUMNS "+
				"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'history_archive' AND COLUMN_NAME <> 'archive_id'")
			d.rows[tb] = column(t, db, "SELECT CONCAT_WS('|', "+cols+") FROM history_archive")
			continue
		}
		var sum sql.NullInt64
		require.NoError(t, db.QueryRowContext(ctx, "CHECKSUM TABLE `"+tb+"`").Scan(&ignored, &sum))
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+tb+"`").Scan(&n))
		d.rows[tb] = fmt.Sprintf("%d rows, checksum %d", n, sum.Int64)
	}
	for _, q := range []string{
		"SELECT CONCAT('trigger ', TRIGGER_NAME) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = DATABASE()",
		"SELECT CONCAT('routine ', ROUTINE_NAME) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()",
		// mysql.event, not information_schema.EVENTS: the latter refuses every read (1577) on a server
		// whose event scheduler is disabled; the former holds the same events either way.
		"SELECT CONCAT('event ', CAST(name AS CHAR)) FROM mysql.event WHERE db = DATABASE()",
		"SELECT CONCAT(TABLE_TYPE, ' ', TABLE_NAME) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE <> 'BASE TABLE'",
	} {
		if s := column(t, db, q); s != "" {
			d.other = append(d.other, s)
		}
	}
	return d
}

// column returns the first column of every row of q, space-separated.
func column(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	rows, err := db.Query(q)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return strings.Join(out, " ")
}
