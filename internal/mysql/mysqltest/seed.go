package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// Seeding and inspection for the benchmark and the chaos run: they load events in bulk, count them
// by state and wait for InnoDB's purge, on a database of their own. They write the rows as the
// stores do (the numbers below are exactlyonce.Pending and exactlyonce.Processed, and a folded state
// is eventstore's CountedShift above its state); nothing in the product calls them. Like the stores'
// statements, every statement says `state = 0` or `state < 10` as a literal, so that MySQL prunes
// it to the `open` partition when it can.

// seqTable holds the integers 1..n that bulk loads select their rows from. It is a helper table of
// the benchmark's scratch databases only, and it has no index either.
const seqTable = "bench_seq"

// Bulk loads of events with ids first..first+n-1 (the ids reserved from the status counter), their
// rows numbered by the sequence table from lo to hi: arguments first, lo, hi.
//
// Processed history keeps routing_hash 0: only claims read the hash, and they never read settled
// rows. Pending events get their real hash (LoadPending), computed in Go as the event store does.
const (
	// Processed history, as a sweeper leaves it: a value, state 10, processed once.
	loadProcessedSQL = "INSERT INTO events (id, value, state, created_at, processed_at, processed_by, process_count)\n" +
		"SELECT ? + n - 1, CONCAT('history-', n), 10, NOW(6), NOW(6), 'sweeper', 1 FROM " + seqTable + " WHERE n BETWEEN ? AND ?"
)

// loadChunk is the most rows one load statement inserts: it bounds each statement (its transaction
// and its time) and lets the caller report progress through a million-row load.
const loadChunk = 250_000

// LoadPending inserts n pending events, as if n async creates had committed, and returns the first
// id: the ids are first..first+n-1, taken from the status counter like every other id, so that the
// database stays one the store could have written. onChunk, if set, is called with the number of
// events loaded after each statement. For the benchmark's scratch databases: it creates a helper
// table there.
func LoadPending(ctx context.Context, db *sql.DB, n int64, onChunk func(done int64)) (int64, error) {
	first, err := reserveIDs(ctx, db, n)
	if err != nil {
		return 0, err
	}
	// MySQL has no murmur3, so the rows are sent with their hashes, by the event store's own insert
	// (InsertPendingRows), pendingChunk rows per statement.
	const pendingChunk = 2000
	for lo := int64(0); lo < n; lo += pendingChunk {
		ids := make([]int64, 0, pendingChunk)
		for id := first + lo; id < first+min(lo+pendingChunk, n); id++ {
			ids = append(ids, id)
		}
		if err := eventstore.InsertPending(ctx, db, ids); err != nil {
			return 0, err
		}
		if onChunk != nil {
			onChunk(min(lo+pendingChunk, n))
		}
	}
	return first, nil
}

// LoadProcessed inserts n processed events (processed once, by the sweeper): the history that
// processing leaves behind, for measuring what it costs a claim. As LoadPending otherwise.
func LoadProcessed(ctx context.Context, db *sql.DB, n int64, onChunk func(done int64)) (int64, error) {
	return load(ctx, db, n, loadProcessedSQL, onChunk)
}

// LoadFoldedHistory inserts n processed events as the sweeper's fold leaves them (counted in
// settled_count, in the `settled` partition): a long history, for measuring what reads cost with
// it. Each chunk and its addition to the count commit together, so the count stays exact. As
// LoadPending otherwise.
func LoadFoldedHistory(ctx context.Context, db *sql.DB, n int64, onChunk func(done int64)) (int64, error) {
	if err := ensureSeq(ctx, db, n); err != nil {
		return 0, err
	}
	first, err := reserveIDs(ctx, db, n)
	if err != nil {
		return 0, err
	}
	folded := strings.Replace(loadProcessedSQL, "10, NOW(6)", fmt.Sprintf("%d, NOW(6)", 10+eventstore.CountedShift), 1)
	core, err := mysql.New(db, mysql.Config{})
	if err != nil {
		return 0, err
	}
	for lo := int64(1); lo <= n; lo += loadChunk {
		hi := min(lo+loadChunk-1, n)
		err := core.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, folded, first, lo, hi); err != nil {
				return err
			}
			_, err := eventstore.AddSettled(ctx, tx, hi-lo+1)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("load folded history: %w", err)
		}
		if onChunk != nil {
			onChunk(hi)
		}
	}
	return first, nil
}

func load(ctx context.Context, db *sql.DB, n int64, q string, onChunk func(done int64)) (int64, error) {
	if err := ensureSeq(ctx, db, n); err != nil {
		return 0, err
	}
	first, err := reserveIDs(ctx, db, n)
	if err != nil {
		return 0, err
	}
	for lo := int64(1); lo <= n; lo += loadChunk {
		hi := min(lo+loadChunk-1, n)
		if _, err := db.ExecContext(ctx, q, first, lo, hi); err != nil {
			return 0, err
		}
		if onChunk != nil {
			onChunk(hi)
		}
	}
	return first, nil
}

// reserveIDs takes n ids from the status counter, as the allocators do (mysql.AdvanceCounter), in a
// transaction of its own at READ COMMITTED, and returns the first.
func reserveIDs(ctx context.Context, db *sql.DB, n int64) (int64, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck
	first, err := mysql.AdvanceCounter(ctx, tx, n)
	if err != nil {
		return 0, err
	}
	return first, tx.Commit()
}

// ensureSeq makes the sequence table hold the integers 1..n (it may hold more), by doubling: each
// INSERT ... SELECT copies the table onto itself shifted by its size, so a million rows take 20
// statements.
func ensureSeq(ctx context.Context, db *sql.DB, n int64) error {
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+seqTable+" (n BIGINT NOT NULL) ENGINE=InnoDB"); err != nil {
		return err
	}
	var have int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+seqTable).Scan(&have); err != nil {
		return err
	}
	if have == 0 {
		if _, err := db.ExecContext(ctx, "INSERT INTO "+seqTable+" VALUES (1)"); err != nil {
			return err
		}
		have = 1
	}
	for have < n {
		if _, err := db.ExecContext(ctx, "INSERT INTO "+seqTable+" SELECT n + ? FROM "+seqTable, have); err != nil {
			return err
		}
		have *= 2
	}
	return nil
}

// InsertProcessedInto returns the statement that stores one processed event as POST /events does
// (eventstore's InsertProcessed), into table instead of events. The allocation benchmark measures the store's
// create (allocation and insert) against this insert alone: into a copy of events (CREATE TABLE t
// LIKE events), with ids it makes up (arguments: id, value), and, with idFromTable, into a table of
// the same columns whose AUTO_INCREMENT key assigns the id (argument: value), the reference the
// schema rules forbid.
func InsertProcessedInto(table string, idFromTable bool) string {
	if idFromTable {
		return "INSERT INTO " + table + " (value, state, created_at, processed_at, processed_by, process_count)\n" +
			"VALUES (?, 10, NOW(6), NOW(6), 'api', 1)"
	}
	return "INSERT INTO " + table + " (id, value, state, created_at, processed_at, processed_by, process_count)\n" +
		"VALUES (?, ?, 10, NOW(6), NOW(6), 'api', 1)"
}

// CountOpen returns the number of open events (pending, or processing under a lease), by a
// consistent read of the `open` partition. A run waits on it for the system to have processed
// everything.
func CountOpen(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events WHERE state < 10").Scan(&n)
	return n, err
}

// EventCounts is what a benchmark checks of the ids after a run: the events table's rows, distinct
// ids, pending rows and the largest id, beside the status counter. Whether each event was settled
// exactly once is internal/verify's to say, from the workers' reports.
type EventCounts struct {
	Rows, Distinct, Pending, MaxID, Counter int64
}

// CountEvents reads EventCounts: the audit's read of `events` and of the packed history (an event
// packed between the two is counted once; one stored twice, twice), then the counter, without a
// lock: it only grows, so read after the scan it is at least every id the scan saw.
func CountEvents(ctx context.Context, db *sql.DB) (EventCounts, error) {
	var c EventCounts
	all, err := AuditEvents(ctx, db)
	if err != nil {
		return c, err
	}
	ids := make(map[int64]bool, len(all))
	for _, a := range all {
		ids[a.ID] = true
		c.MaxID = max(c.MaxID, a.ID)
		if a.State < exactlyonce.Processed {
			c.Pending++
		}
	}
	c.Rows, c.Distinct = int64(len(all)), int64(len(ids))
	err = db.QueryRowContext(ctx, "SELECT id FROM status").Scan(&c.Counter)
	return c, err
}

func (c EventCounts) String() string {
	return fmt.Sprintf("%d rows, %d distinct ids, %d pending, max id %d, counter %d",
		c.Rows, c.Distinct, c.Pending, c.MaxID, c.Counter)
}

// IDsOK tells whether every id is distinct and came from the counter.
func (c EventCounts) IDsOK() bool { return c.Rows == c.Distinct && c.MaxID <= c.Counter }

// AsyncProcessed is when and by whom an event created async was processed.
type AsyncProcessed struct {
	ID int64
	// At is processed_at, on the database's clock.
	At time.Time
	// By is the path that processed it: the processor or a sweeper.
	By string
}

// ProcessedAsync returns the processed events with ids from lo to hi that the API did not process
// (created async), in no particular order: the benchmark's latencies from request to processed.
// The id range bounds the scan to one round's events: those in `events`, then those the sweeper
// packed meanwhile, read from their units' columns.
func ProcessedAsync(ctx context.Context, db *sql.DB, lo, hi int64) ([]AsyncProcessed, error) {
	rows, err := db.QueryContext(ctx,
		"SELECT id, processed_at, processed_by FROM events WHERE state IN (10, 30) AND processed_by <> 'api' AND id BETWEEN ? AND ?", lo, hi)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AsyncProcessed
	seen := map[int64]bool{}
	for rows.Next() {
		var p AsyncProcessed
		if err := rows.Scan(&p.ID, &p.At, &p.By); err != nil {
			return nil, err
		}
		seen[p.ID] = true
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for u := pages.UnitOf(lo); u <= pages.UnitOf(hi); u++ {
		packed, err := pagestore.ReadColumns(ctx, db, pages.UnitPage(u), pages.FirstColumn(u), pages.UnitColumns)
		if err != nil {
			return nil, err
		}
		for _, r := range packed {
			if r.ID >= lo && r.ID <= hi && !seen[r.ID] && r.ProcessedAt != nil && r.ProcessedBy != nil && *r.ProcessedBy != exactlyonce.ByAPI {
				seen[r.ID] = true
				out = append(out, AsyncProcessed{ID: r.ID, At: *r.ProcessedAt, By: *r.ProcessedBy})
			}
		}
	}
	return out, nil
}

// PurgeBacklog is InnoDB's purge backlog (its history list length): undo logs of committed
// transactions not purged yet. Rows that processing moved out of the `open` partition stay there,
// delete-marked, until purge removes them, and every claim's scan walks over them: a benchmark of
// claims must start from a backlog that is alike for every contender.
func PurgeBacklog(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx,
		"SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'").Scan(&n)
	return n, err
}

// AwaitPurge waits until the purge backlog is at most limit or timeout passes, polling every 50 ms.
// It returns the backlog it saw last, and an error if the wait ran out.
func AwaitPurge(ctx context.Context, db *sql.DB, limit int64, timeout time.Duration) (int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, err := PurgeBacklog(ctx, db)
		if err != nil || n <= limit {
			return n, err
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("purge backlog still %d after %s: timed out", n, timeout)
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
