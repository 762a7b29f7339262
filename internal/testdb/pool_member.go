package testdb

// A member put back into the template's state: its shape read and compared, its size checked, its
// rows replaced by the template's, and the connections a test left on it killed (pool.go says why).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"

	drv "github.com/go-sql-driver/mysql"
)

// readShape reads a database's options and tables.
func readShape(ctx context.Context, conn *sql.Conn, db string) (*shape, error) {
	s := &shape{}
	var name string
	if err := conn.QueryRowContext(ctx, "SHOW CREATE DATABASE "+db).Scan(&name, &s.database); err != nil {
		return nil, err
	}
	s.database = strings.Replace(s.database, "`"+db+"`", "`?`", 1)
	rows, err := conn.QueryContext(ctx, "SHOW FULL TABLES FROM "+db)
	if err != nil {
		return nil, err
	}
	var names []string
	for rows.Next() {
		var n, kind string
		if err := rows.Scan(&n, &kind); err != nil {
			rows.Close()
			return nil, err
		}
		if kind != "BASE TABLE" {
			rows.Close()
			return nil, fmt.Errorf("%s.%s is a %s", db, n, kind)
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, n := range names {
		t := table{name: n}
		var ignored string
		if err := conn.QueryRowContext(ctx, fmt.Sprintf("SHOW CREATE TABLE %s.`%s`", db, n)).Scan(&ignored, &t.create); err != nil {
			return nil, err
		}
		var one int
		err := conn.QueryRowContext(ctx, fmt.Sprintf("SELECT 1 FROM %s.`%s` LIMIT 1", db, n)).Scan(&one)
		switch {
		case err == nil:
			t.seeded = true
		case !errors.Is(err, sql.ErrNoRows):
			return nil, err
		}
		s.tables = append(s.tables, t)
	}
	// The objects SHOW FULL TABLES does not list. The rules forbid them, so the template has none;
	// a member that has one was changed by a test.
	for _, q := range []string{
		"SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = ?",
		"SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ?",
		"SELECT COUNT(*) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = ?",
	} {
		var n int
		err := conn.QueryRowContext(ctx, q, db).Scan(&n)
		if isErr(err, errEventSchedulerDisabled) {
			// The server's scheduler cannot run, and information_schema.EVENTS refuses every read;
			// the events are still rows of mysql.event (as mysql.CheckRules reads them then).
			q = "SELECT COUNT(*) FROM mysql.event WHERE db = ?"
			err = conn.QueryRowContext(ctx, q, db).Scan(&n)
		}
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return nil, fmt.Errorf("%s holds an object the schema rules forbid (%s)", db, q)
		}
	}
	return s, nil
}

// errEventSchedulerDisabled is the server's answer to a read of information_schema.EVENTS while its
// event scheduler cannot run (event_scheduler=DISABLED, or privileges turned on after a start under
// --skip-grant-tables).
const errEventSchedulerDisabled = 1577

// errDrift says a member's schema is no longer the template's.
var errDrift = errors.New("not the template's schema")

// errGrown says a test left a member's files much larger than the template's. Deleting rows does not
// shrink InnoDB's files, so a member that once held a test's large payloads would keep their space
// (in memory, on the tests' server) for every later lease: it is dropped and another made instead.
var errGrown = errors.New("grown past the template's size")

// maxGrowth is how much larger than the template a member may be at its next lease. The template
// takes about 40 MB in these terms; the tests with the largest payloads leave 300 MB more.
const maxGrowth = 64 << 20

// size is the space db's tables take: data, indexes and free space, as InnoDB's statistics say
// (refreshed in the background after a table's rows changed by a tenth; a member that grew is
// found at a later lease if not at the next). A cheap read: the file sizes themselves
// (information_schema.INNODB_SYS_TABLESPACES) are read by scanning every database's partitions.
func size(ctx context.Context, conn *sql.Conn, db string) (int64, error) {
	var n sql.NullInt64
	err := conn.QueryRowContext(ctx, `SELECT SUM(DATA_LENGTH + INDEX_LENGTH + DATA_FREE) FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = ?`, db).Scan(&n)
	return n.Int64, err
}

// grown tells whether db takes more than limit bytes beyond the template.
func (p *pool) grown(ctx context.Context, conn *sql.Conn, db string, limit int64) (bool, error) {
	want, err := p.templateShape(ctx)
	if err != nil {
		return false, err
	}
	got, err := size(ctx, conn, db)
	if err != nil {
		return false, err
	}
	return got-want.size > limit, nil
}

// reset puts a member (whose lock conn holds) into the template's state: no other connection on
// it, the template's schema (checked; errDrift if not) and the template's rows in every table.
func (p *pool) reset(ctx context.Context, conn *sql.Conn, db string) error {
	if err := killConnections(ctx, conn, db); err != nil {
		return err
	}
	want, err := p.templateShape(ctx)
	if err != nil {
		return err
	}
	got, err := readShape(ctx, conn, db)
	if err != nil {
		return fmt.Errorf("%w: %v", errDrift, err)
	}
	if got.database != want.database || len(got.tables) != len(want.tables) {
		return errDrift
	}
	for i, t := range want.tables {
		if got.tables[i].name != t.name || got.tables[i].create != t.create {
			return fmt.Errorf("%w: table %s", errDrift, t.name)
		}
	}
	if big, err := p.grown(ctx, conn, db, maxGrowth); err != nil {
		return err
	} else if big {
		return errGrown
	}
	for i, t := range want.tables {
		if !t.seeded && !got.tables[i].seeded {
			continue // empty in both
		}
		if t.seeded && got.tables[i].seeded {
			// Most tests leave the seeded tables (the buckets, 20,500 rows) as they were: comparing
			// them costs two reads, where copying them again took most of a lease (0.14 s of the
			// server's CPU of 0.17; a lease now takes 0.04-0.08).
			if sum, err := sumRows(ctx, conn, db, t.name); err != nil {
				return err
			} else if sum == t.rows {
				continue
			}
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s.`%s`", db, t.name)); err != nil {
			return err
		}
		if t.seeded {
			if _, err := conn.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s.`%s` SELECT * FROM %s.`%s`",
				db, t.name, p.tpl, t.name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ownArchiveID gives a leased member db (reset to the template's rows) an archive identity of its own (history_archive.archive_id,
// migration 0038), as every database made by migrating has: a copy of the template's rows would
// share the template's with every other member, and two test databases writing one bucket would
// take each other's objects for their own.
func (p *pool) ownArchiveID(ctx context.Context, conn *sql.Conn, db string) error {
	want, err := p.templateShape(ctx)
	if err != nil {
		return err
	}
	for _, t := range want.tables {
		if t.name == "history_archive" && strings.Contains(t.create, "`archive_id`") {
			_, err := conn.ExecContext(ctx, fmt.Sprintf("UPDATE %s.`history_archive` SET archive_id = UUID()", db))
			return err
		}
	}
	return nil
}

// sumRows reads a table's row count and CHECKSUM TABLE (a sum of a checksum of each row, so the
// rows' order is not compared: the tables have no key, and no statement may rely on an order
// without ORDER BY).
func sumRows(ctx context.Context, conn *sql.Conn, db, table string) (rowsSum, error) {
	var r rowsSum
	var ignored string
	var sum sql.NullInt64
	if err := conn.QueryRowContext(ctx, fmt.Sprintf("CHECKSUM TABLE %s.`%s`", db, table)).Scan(&ignored, &sum); err != nil {
		return r, err
	}
	r.checksum = sum.Int64
	err := conn.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s.`%s`", db, table)).Scan(&r.count)
	return r, err
}

// killConnections ends every connection whose current database is db, but conn's own.
func killConnections(ctx context.Context, conn *sql.Conn, db string) error {
	rows, err := conn.QueryContext(ctx,
		"SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()", db)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		// 1094: unknown thread, it ended by itself meanwhile.
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil && !isErr(err, 1094) {
			return err
		}
	}
	return nil
}

func isErr(err error, number uint16) bool {
	var me *drv.MySQLError
	return errors.As(err, &me) && me.Number == number
}
