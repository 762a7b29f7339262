package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version    int
	name       string
	statements []string
}

func loadMigrations() ([]migration, error) {
	out, err := migrationNames()
	if err != nil {
		return nil, err
	}
	for i, m := range out {
		b, err := migrationFiles.ReadFile("migrations/" + m.name)
		if err != nil {
			return nil, err
		}
		out[i].statements = splitStatements(string(b))
	}
	return out, nil
}

// migrationNames returns the embedded migrations in order, with their versions and names and
// without their statements: all that Migrate needs to see that a schema is current, which every
// process does at start-up (DB_MIGRATE), where reading and splitting every file took 0.2-0.4 ms.
func migrationNames() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", e.Name())
		}
		v, err := strconv.Atoi(prefix)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		out = append(out, migration{version: v, name: e.Name()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// splitStatements splits a migration on semicolons that end a line, dropping comment lines.
func splitStatements(s string) []string {
	var out, cur []string
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur = append(cur, line)
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(strings.Join(cur, "\n")), ";"))
			cur = nil
		}
	}
	if len(cur) > 0 {
		out = append(out, strings.TrimSpace(strings.Join(cur, "\n")))
	}
	return out
}

// LatestVersion is the version of the newest embedded migration.
func LatestVersion() int {
	ms, err := migrationNames()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate brings the database's schema up to the embedded migrations. It is idempotent and safe to
// run from many processes at once (ten Lambdas cold-starting against an empty database): a process
// that finds the schema current returns after one read; the others serialise on a named lock
// (GET_LOCK, per database), and each migration is recorded in schema_migrations after it runs.
// After migrating it verifies the schema rules and fails if any is broken.
//
// Every run also checks the id counter (checkCounter): a lost counter row is re-created above the
// largest id in use, and a counter with more than one row is an error; and the same of
// settled_count's row (checkSettledCount).
func Migrate(ctx context.Context, db *sql.DB) error {
	names, err := migrationNames()
	if err != nil {
		return err
	}
	if current(ctx, db, names) {
		return nil
	}
	ms, err := loadMigrations()
	if err != nil {
		return err
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// GET_LOCK pins the session on RDS Proxy until the client connection closes, so this
	// connection is discarded rather than returned to the pool.
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}()

	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx,
		"SELECT GET_LOCK(CONCAT('exactlyonce.migrate.', DATABASE()), 60)").Scan(&got); err != nil {
		return fmt.Errorf("migrate: take lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return errors.New("migrate: another process held the migration lock for 60 s")
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), //nolint:errcheck // the connection is discarded anyway
		"SELECT RELEASE_LOCK(CONCAT('exactlyonce.migrate.', DATABASE()))")

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
  version    INT         NOT NULL,
  applied_at DATETIME(6) NOT NULL
) ENGINE=InnoDB`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		// MySQL commits DDL implicitly, so a migration is not atomic: its statements are written to be
		// idempotent (IF NOT EXISTS, guarded inserts) and a failed one is rerun whole next time.
		for _, stmt := range m.statements {
			if _, err := conn.ExecContext(ctx, stmt); err != nil && !alreadyApplied(err) {
				return fmt.Errorf("migrate %s: %w", m.name, err)
			}
		}
		if _, err := conn.ExecContext(ctx,
			"INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", m.version, time.Now().UTC()); err != nil {
			return fmt.Errorf("migrate %s: record: %w", m.name, err)
		}
	}
	if err := checkCounter(ctx, conn); err != nil {
		return err
	}
	if err := checkSettledCount(ctx, conn); err != nil {
		return err
	}
	if violations, err := CheckRules(ctx, db); err != nil {
		return err
	} else if len(violations) > 0 {
		return fmt.Errorf("schema rules broken: %s", strings.Join(violations, "; "))
	}
	return nil
}

// CounterSeedGap is how far above the largest event id a lost counter row is re-created. No table
// records the ids a running process has reserved but not used yet (the block allocator holds up to
// two blocks of DefaultBlockSize in memory, and keeps handing them out while the row is missing), so
// a row re-created at the largest stored id could hand them out a second time. The gap skips them
// for up to 512 processes at the default block size; ids are BIGINT, so the gap costs nothing.
const CounterSeedGap = 1 << 20

// checkCounter makes sure the status table holds exactly one row, the id counter, on the
// migration's connection (under its named lock): a missing row is re-created CounterSeedGap above
// the largest event id, so that no id in use is handed out again; more than one row is an error
// that names the fix, and nothing is changed.
func checkCounter(ctx context.Context, conn *sql.Conn) error {
	var rows int
	if err := conn.QueryRowContext(ctx, queries.CounterRows).Scan(&rows); err != nil {
		return fmt.Errorf("migrate: check the id counter: %w", err)
	}
	switch {
	case rows == 1:
		return nil
	case rows > 1:
		return fmt.Errorf("migrate: table status holds %d rows; it must hold exactly one, the id counter "+
			"(with more, two writers can take the same ids). Refusing to run. Stop every writer, run "+
			"DELETE FROM status, and migrate again: it re-creates the counter above the largest event id", rows)
	}
	var largest int64
	if err := conn.QueryRowContext(ctx, queries.LargestEventID).Scan(&largest); err != nil {
		return fmt.Errorf("migrate: re-create the id counter: %w", err)
	}
	if _, err := conn.ExecContext(ctx, queries.SeedCounter, largest+CounterSeedGap); err != nil {
		return fmt.Errorf("migrate: re-create the id counter: %w", err)
	}
	return nil
}

// errDuplicateColumn is ER_DUP_FIELDNAME, "Duplicate column name": an ALTER TABLE ... ADD COLUMN
// whose column exists.
const errDuplicateColumn = 1060

// errSamePartitionName is ER_SAME_NAME_PARTITION, "Duplicate partition name": an ALTER TABLE ...
// REORGANIZE PARTITION run again after it was applied (0009 splits `open` into `open` and `queued`;
// a rerun finds `queued` there). The ALTER is atomic, so the error means the layout is the new one.
const errSamePartitionName = 1517

// alreadyApplied tells whether a migration statement failed only because an earlier run of the
// same migration applied it: MySQL 8 has no ADD COLUMN IF NOT EXISTS, and one ALTER TABLE is atomic,
// so a duplicate column means that ALTER completed before.
func alreadyApplied(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == errDuplicateColumn || me.Number == errSamePartitionName)
}

// current says, in one statement, that the schema needs nothing: schema_migrations records every
// embedded migration as applied (their count, not the newest version recorded: a database migrated
// by code whose migrations skipped a number, a branch, must still get the one it skipped), and the
// id counter and settled_count each hold their one row. Any error (a table missing) is a no: Migrate
// then takes its lock and looks again. One round trip, not three: every process makes it at
// start-up (DB_MIGRATE), a Lambda's cold start among them.
func current(ctx context.Context, db *sql.DB, ms []migration) bool {
	var applied, counters, counts int
	err := db.QueryRowContext(ctx, "SELECT (SELECT COUNT(DISTINCT version) FROM schema_migrations WHERE version <= ?), ("+
		queries.CounterRows+"), ("+queries.SettledCountRows+")", ms[len(ms)-1].version).Scan(&applied, &counters, &counts)
	return err == nil && applied == len(ms) && counters == 1 && counts == 1
}

// ruleChecks are the reads of information_schema behind CheckRules, each naming what it finds. Each
// is confined to the current database in a form the server uses to read no other, so that the check
// costs the same whatever else the server holds (TestSchemaRulesReadOnlyTheirDatabase).
//
// A check may name a fallback: the read to make when the server refuses the first with the error
// given (information_schema.EVENTS fails with 1577 while the event scheduler is disabled; the events
// are still in mysql.event, which the migrating user can read).
var ruleChecks = []struct {
	what, query string
	unless      uint16 // the server's error number that sends the check to its fallback
	fallback    string
}{
	{"index", `SELECT CONCAT(TABLE_NAME, '.', INDEX_NAME) FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE()`, 0, ""},
	{"constraint", `SELECT CONCAT(TABLE_NAME, '.', CONSTRAINT_NAME, ' (', CONSTRAINT_TYPE, ')')
		FROM information_schema.TABLE_CONSTRAINTS
		WHERE TABLE_SCHEMA = DATABASE() AND CONSTRAINT_TYPE IN ('PRIMARY KEY', 'UNIQUE', 'FOREIGN KEY')`, 0, ""},
	{"foreign key", `SELECT CONCAT(TABLE_NAME, '.', CONSTRAINT_NAME) FROM information_schema.REFERENTIAL_CONSTRAINTS
		WHERE CONSTRAINT_SCHEMA = DATABASE()`, 0, ""},
	{"auto-increment", `SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND EXTRA LIKE '%auto_increment%'`, 0, ""},
	// A trigger lives in its table's schema. EVENT_OBJECT_SCHEMA, not TRIGGER_SCHEMA: MariaDB finds
	// triggers through their tables, and filtered on TRIGGER_SCHEMA it opens every table of every
	// database on the server (EXPLAIN: "Scanned all databases"), seconds beside other databases.
	{"trigger", `SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = DATABASE()`, 0, ""},
	{"stored routine", `SELECT CONCAT(ROUTINE_TYPE, ' ', ROUTINE_NAME) FROM information_schema.ROUTINES
		WHERE ROUTINE_SCHEMA = DATABASE()`, 0, ""},
	{"view", `SELECT TABLE_NAME FROM information_schema.VIEWS WHERE TABLE_SCHEMA = DATABASE()`, 0, ""},
	{"scheduled event", `SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = DATABASE()`,
		errEventSchedulerDisabled, `SELECT CAST(name AS CHAR) FROM mysql.event WHERE db = DATABASE()`},
	// A sequence is a counter the server advances: an auto-increment by another name.
	{"sequence", `SELECT TABLE_NAME FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'SEQUENCE'`, 0, ""},
}

// errEventSchedulerDisabled is the server's answer to a read of information_schema.EVENTS while its
// event scheduler cannot run: "Cannot proceed, because event scheduler is disabled".
const errEventSchedulerDisabled = 1577

// CheckRules lists every breach of the schema rules in the current database: primary keys, unique
// keys, foreign keys, indexes of any kind, auto-increment columns, triggers, stored routines
// (procedures and functions), views, scheduled events and sequences (MariaDB's; MySQL has none).
// The rules allow tables and nothing else: no object that holds logic or hands out numbers in the
// database. An empty list means the rules hold.
func CheckRules(ctx context.Context, db *sql.DB) ([]string, error) {
	var out []string
	for _, c := range ruleChecks {
		rows, err := db.QueryContext(ctx, c.query)
		var me *mysql.MySQLError
		if err != nil && c.fallback != "" && errors.As(err, &me) && me.Number == c.unless {
			rows, err = db.QueryContext(ctx, c.fallback)
		}
		if err != nil {
			return nil, fmt.Errorf("check rules (%s): %w", c.what, err)
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, c.what+" "+name)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkSettledCount makes sure settled_count holds exactly one row, on the migration's connection
// (under its named lock): a missing row is re-created with the number of events already counted
// (the `settled` partition), so that the count stays exact; more than one row is an error that
// names the fix, and nothing is changed.
func checkSettledCount(ctx context.Context, conn *sql.Conn) error {
	var rows int
	if err := conn.QueryRowContext(ctx, queries.SettledCountRows).Scan(&rows); err != nil {
		return fmt.Errorf("migrate: check settled_count: %w", err)
	}
	switch {
	case rows == 1:
		return nil
	case rows > 1:
		return fmt.Errorf("migrate: table settled_count holds %d rows; it must hold exactly one, the number "+
			"of counted events (with more, GET /events cannot answer). Refusing to run. Run "+
			"DELETE FROM settled_count and migrate again: it re-creates the row from the events table", rows)
	}
	var counted int64
	if err := conn.QueryRowContext(ctx, queries.CountSettledEvents).Scan(&counted); err != nil {
		return fmt.Errorf("migrate: re-create settled_count: %w", err)
	}
	if _, err := conn.ExecContext(ctx, queries.SeedSettledCount, counted); err != nil {
		return fmt.Errorf("migrate: re-create settled_count: %w", err)
	}
	return nil
}
