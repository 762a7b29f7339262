package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	drv "github.com/go-sql-driver/mysql"
)

// scratch is a database the benchmark creates and drops.
type scratch struct {
	admin *sql.DB
	name  string
	dsn   string
}

func serverVersion(ctx context.Context, serverDSN string) (string, error) {
	cfg, err := drv.ParseDSN(serverDSN)
	if err != nil {
		return "", err
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var v string
	var pool, redo int64
	// The version, and the two InnoDB settings that decide whether a write-heavy run is bound by the
	// server's page flushing (scripts/mariadb.sh says why it sets them): figures are comparable only
	// between servers configured alike.
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@innodb_buffer_pool_size, @@innodb_log_file_size").Scan(&v, &pool, &redo); err != nil {
		return "", fmt.Errorf("no database server at %s (run `make db`, or set BENCH_DB_DSN): %w", cfg.Addr, err)
	}
	return fmt.Sprintf("%s, innodb_buffer_pool_size %d MiB, innodb_log_file_size %d MiB", v, pool>>20, redo>>20), nil
}

// newScratch creates an empty database bench_<label>_<random> and, if migrate, applies the schema.
func (r *run) newScratch(ctx context.Context, label string, migrate bool) (*scratch, error) {
	cfg, err := drv.ParseDSN(r.cfg.ServerDSN)
	if err != nil {
		return nil, err
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := &scratch{admin: admin, name: "bench_" + label + "_" + hex.EncodeToString(b)}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+s.name); err != nil {
		admin.Close()
		return nil, err
	}
	cfg.DBName = s.name
	s.dsn = cfg.FormatDSN()
	if migrate {
		db, err := s.open(2)
		if err != nil {
			s.drop()
			return nil, err
		}
		defer db.Close()
		if err := mysql.Migrate(ctx, db); err != nil {
			s.drop()
			return nil, fmt.Errorf("migrate %s: %w", s.name, err)
		}
	}
	return s, nil
}

// open returns a pool on the scratch database with the store's connection settings.
func (s *scratch) open(maxOpen int) (*sql.DB, error) {
	return mysql.Open(mysql.ConnConfig{DSN: s.dsn, MaxOpenConns: maxOpen})
}

// drop drops the database, whatever state the run is in.
func (s *scratch) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, _ = s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+s.name)
	s.admin.Close()
}

// reserveIDs takes n ids from the status counter, as the allocators do, and returns the first.
// Bulk-loaded events get their ids here, so every id in a scratch database comes from the counter.
func reserveIDs(ctx context.Context, db *sql.DB, n int64) (int64, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck
	var old int64
	if err := tx.QueryRowContext(ctx, "SELECT id FROM status FOR UPDATE").Scan(&old); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE status SET id = id + ?", n); err != nil {
		return 0, err
	}
	return old + 1, tx.Commit()
}

// ensureSeq makes the helper table bench_seq hold the integers 1..n (it may hold more), by
// doubling: each INSERT ... SELECT copies the table onto itself shifted by its size. It is a table
// of the scratch database only, and it has no index either.
func ensureSeq(ctx context.Context, db *sql.DB, n int64) error {
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS bench_seq (n BIGINT NOT NULL) ENGINE=InnoDB"); err != nil {
		return err
	}
	var have int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM bench_seq").Scan(&have); err != nil {
		return err
	}
	if have == 0 {
		if _, err := db.ExecContext(ctx, "INSERT INTO bench_seq VALUES (1)"); err != nil {
			return err
		}
		have = 1
	}
	for have < n {
		if _, err := db.ExecContext(ctx, "INSERT INTO bench_seq SELECT n + ? FROM bench_seq", have); err != nil {
			return err
		}
		have *= 2
	}
	return nil
}

// loadEvents inserts n events with ids from the status counter, in statements of at most chunk
// rows: pending ones (state 0) or processed ones (state 10, the history). It returns the first id;
// the ids are first..first+n-1.
func loadEvents(ctx context.Context, db *sql.DB, n int64, processed bool, onChunk func(done int64)) (int64, error) {
	if err := ensureSeq(ctx, db, n); err != nil {
		return 0, err
	}
	first, err := reserveIDs(ctx, db, n)
	if err != nil {
		return 0, err
	}
	q := "INSERT INTO events (id, value, state, created_at) SELECT ? + n - 1, NULL, 0, NOW(6) FROM bench_seq WHERE n BETWEEN ? AND ?"
	if processed {
		q = `INSERT INTO events (id, value, state, created_at, processed_at, processed_by, process_count)
SELECT ? + n - 1, CONCAT('history-', n), 10, NOW(6), NOW(6), 'sweeper', 1 FROM bench_seq WHERE n BETWEEN ? AND ?`
	}
	const chunk = 250_000
	for lo := int64(1); lo <= n; lo += chunk {
		hi := min(lo+chunk-1, n)
		if _, err := db.ExecContext(ctx, q, first, lo, hi); err != nil {
			return 0, err
		}
		if onChunk != nil {
			onChunk(hi)
		}
	}
	return first, nil
}

// historyLength is InnoDB's purge backlog: undo logs of committed transactions not purged yet. Rows
// that processing moved out of the `open` partition stay there, delete-marked, until purge removes
// them, and every claim's scan walks over them.
func historyLength(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx,
		"SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'").Scan(&n)
	return n, err
}

// awaitPurge waits until the purge backlog is at most limit or timeout passes, polling. It returns
// the backlog it saw last.
func awaitPurge(ctx context.Context, db *sql.DB, limit int64, timeout time.Duration) (int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, err := historyLength(ctx, db)
		if err != nil || n <= limit {
			return n, err
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("purge backlog still %d after %s: %w", n, timeout, errTimeout)
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// counts reports the events table's rows, distinct ids, pending rows, rows not written exactly
// once, and the largest id, beside the counter.
type counts struct {
	rows, distinct, pending, wrong, maxID, counter int64
}

func countEvents(ctx context.Context, db *sql.DB) (counts, error) {
	var c counts
	var maxID sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT id), COALESCE(SUM(state = 0), 0),
  COALESCE(SUM((state = 0 AND process_count <> 0) OR (state <> 0 AND process_count <> 1)), 0), MAX(id) FROM events`).
		Scan(&c.rows, &c.distinct, &c.pending, &c.wrong, &maxID)
	if err != nil {
		return c, err
	}
	c.maxID = maxID.Int64
	err = db.QueryRowContext(ctx, "SELECT id FROM status").Scan(&c.counter)
	return c, err
}

func (c counts) String() string {
	return fmt.Sprintf("%d rows, %d distinct ids, %d pending, %d not written exactly once, max id %d, counter %d",
		c.rows, c.distinct, c.pending, c.wrong, c.maxID, c.counter)
}

// idsOK tells whether every id is distinct and came from the counter.
func (c counts) idsOK() bool { return c.rows == c.distinct && c.maxID <= c.counter }
