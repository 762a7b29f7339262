package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/routing"
	"github.com/go-sql-driver/mysql"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// Allocator is AllocatorBlock (default) or AllocatorLiteral.
	Allocator string
	// BlockSize is the number of ids AllocatorBlock reserves per status-row transaction. Default
	// DefaultBlockSize.
	BlockSize int
	// Retry bounds the retries of deadlocked or timed-out transactions.
	Retry RetryPolicy
}

// Store reads and writes events. Safe for concurrent use; build one per process.
type Store struct {
	db    *sql.DB
	alloc allocator
	stats *Stats
	retry RetryPolicy
	// taskCreates groups concurrent CreateTasks calls into shared transactions (tasks.go).
	taskCreates taskCreates
	// keyed holds the connections with autocommit off that keyed creates run on (manualtx.go).
	keyed *manualConns
}

// NewStore returns a Store on db, which must be migrated (see Migrate).
func NewStore(db *sql.DB, cfg StoreConfig) (*Store, error) {
	s := &Store{db: db, stats: &Stats{}, retry: cfg.Retry.withDefaults(), keyed: &manualConns{db: db}}
	switch cmp.Or(cfg.Allocator, DefaultAllocator) {
	case AllocatorBlock:
		size := cmp.Or(cfg.BlockSize, DefaultBlockSize)
		if size < 1 {
			return nil, fmt.Errorf("allocator block size must be positive, got %d", size)
		}
		s.alloc = &blockAllocator{db: db, stats: s.stats, retry: s.retry, size: int64(size)}
	case AllocatorLiteral:
		s.alloc = &literalAllocator{}
	default:
		return nil, fmt.Errorf("unknown allocator %q (want %q or %q)", cfg.Allocator, AllocatorBlock, AllocatorLiteral)
	}
	return s, nil
}

// DB returns the pool the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// Stats returns the retry counters of this store's transactions.
func (s *Store) Stats() StatsSnapshot { return s.stats.Snapshot() }

// CreateProcessed stores a new event that is processed from birth, with the given value.
func (s *Store) CreateProcessed(ctx context.Context, value string) (exactlyonce.Event, error) {
	ids, err := s.write(ctx, 1, insertProcessed(value))
	if err != nil {
		return exactlyonce.Event{}, interpret("create event", err)
	}
	return processedEvent(ids[0], value), nil
}

// CreatePending stores a new pending event and returns its id. Once this returns, the event is
// committed: a queue message naming it may be sent.
func (s *Store) CreatePending(ctx context.Context) (int64, error) {
	ids, err := s.CreatePendingBatch(ctx, 1)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// MaxPendingBatch is the most events one CreatePendingBatch stores: one INSERT of about 30 bytes
// of SQL per row, well under the 16 KB beyond which RDS Proxy pins a session.
const MaxPendingBatch = 200

// CreatePendingBatch stores n new pending events with one INSERT, so all or none of them, and
// returns their ids. It is how a process serving many concurrent async requests stores them at
// the cost of about one (internal/api/group.go).
func (s *Store) CreatePendingBatch(ctx context.Context, n int) ([]int64, error) {
	if err := checkPendingBatch(n); err != nil {
		return nil, err
	}
	ids, err := s.write(ctx, n, insertPending)
	if err != nil {
		return nil, interpret("create pending event", err)
	}
	return ids, nil
}

// write takes n ids and inserts the rows that use them with insert. With an allocator that takes
// ids outside any transaction (block), the insert is one autocommit statement, atomic by itself:
// no BEGIN and COMMIT round trips on the hot path. With one that takes them in the caller's
// transaction (literal), both run in one transaction of the store's.
func (s *Store) write(ctx context.Context, n int, insert func(context.Context, execer, []int64) error) ([]int64, error) {
	if !s.alloc.inTx() {
		ids, err := s.alloc.take(ctx, nil, n)
		if err != nil {
			return nil, err
		}
		// A failed insert loses these ids: gaps, never duplicates.
		rec := metrics.From(ctx)
		if rec == nil {
			return ids, insert(ctx, s.db, ids)
		}
		// The autocommit insert is a write transaction of its own: its duration is recorded as
		// inTx's are.
		start := time.Now()
		if err := insert(ctx, s.db, ids); err != nil {
			return ids, err
		}
		rec.ObserveDuration(metrics.TransactionDuration, time.Since(start))
		rec.Add(metrics.Transactions, 1)
		return ids, nil
	}
	var ids []int64
	err := inTx(ctx, s.db, s.stats, s.retry, func(tx *sql.Tx) error {
		var err error
		if ids, err = s.alloc.take(ctx, tx, n); err != nil {
			return err
		}
		return insert(ctx, tx, ids)
	})
	return ids, err
}

// Tx is one write transaction of the store: what is written through it commits together with
// everything else written in it, or not at all. It is how a create is made atomic with rows of the
// caller's (an idempotency key and its stored answer, a task's metadata). Ids are handed out by the
// allocator; the rows are inserted in this transaction.
type Tx struct {
	store *Store
	tx    *sql.Tx
}

// InTx runs fn in one write transaction and commits it, in the store's one transaction shape: READ
// COMMITTED, rolled back on any error, run again after a deadlock or a lock wait timeout (so fn
// must be safe to run again, touching the database only through its Tx). Ids taken by a
// transaction that rolled back are never used: gaps, never duplicates.
func (s *Store) InTx(ctx context.Context, fn func(context.Context, *Tx) error) error {
	err := inTx(ctx, s.db, s.stats, s.retry, func(tx *sql.Tx) error { return fn(ctx, &Tx{store: s, tx: tx}) })
	return interpret("write transaction", err)
}

// CreatePending inserts n new pending events in the transaction and returns their ids.
func (t *Tx) CreatePending(ctx context.Context, n int) ([]int64, error) {
	if err := checkPendingBatch(n); err != nil {
		return nil, err
	}
	ids, err := t.store.alloc.take(ctx, t.tx, n)
	if err != nil {
		return nil, err
	}
	return ids, insertPending(ctx, t.tx, ids)
}

// CreateProcessed inserts a new event, processed from birth with value, in the transaction.
func (t *Tx) CreateProcessed(ctx context.Context, value string) (exactlyonce.Event, error) {
	ids, err := t.store.alloc.take(ctx, t.tx, 1)
	if err != nil {
		return exactlyonce.Event{}, err
	}
	if err := insertProcessed(value)(ctx, t.tx, ids); err != nil {
		return exactlyonce.Event{}, err
	}
	return processedEvent(ids[0], value), nil
}

func checkPendingBatch(n int) error {
	if n < 1 || n > MaxPendingBatch {
		return fmt.Errorf("create pending events: %d events; one batch is 1 to %d", n, MaxPendingBatch)
	}
	return nil
}

func insertPending(ctx context.Context, ex execer, ids []int64) error {
	q, args := expandEventRows(query("InsertPendingRows"), "(?, ?, NULL, 0, NOW(6))", ids)
	_, err := ex.ExecContext(ctx, q, args...)
	return err
}

func insertProcessed(value string) func(context.Context, execer, []int64) error {
	return func(ctx context.Context, ex execer, ids []int64) error {
		_, err := ex.ExecContext(ctx, query("InsertProcessed"), ids[0], routing.EventHash(ids[0]), value)
		return err
	}
}

func processedEvent(id int64, value string) exactlyonce.Event {
	return exactlyonce.Event{ID: id, Kind: exactlyonce.KindPlain, Value: &value, State: exactlyonce.Processed,
		ProcessedBy: exactlyonce.ByAPI, ProcessCount: 1}
}

// Get returns one event, or an ENOTFOUND error. A task comes with its webhook (Event.Task).
func (s *Store) Get(ctx context.Context, id int64) (exactlyonce.Event, error) {
	e, err := scanEvent(s.db.QueryRowContext(ctx, query("Get"), id))
	if errors.Is(err, sql.ErrNoRows) {
		// Not in `events`: packed (pages.go), or unknown. `events` is read first: a pack inserts
		// the page and deletes the event in one transaction, so an event missing from the first
		// read was packed before it, and its page is there for the second.
		r, ok, perr := getPacked(ctx, s.db, id)
		if perr != nil {
			return exactlyonce.Event{}, interpret("get event", perr)
		}
		if !ok {
			return exactlyonce.Event{}, exactlyonce.Errorf(exactlyonce.ENOTFOUND, "event %d not found", id)
		}
		return packedEvent(r), nil
	}
	if err != nil {
		return exactlyonce.Event{}, interpret("get event", err)
	}
	return e, nil
}

// scanEvent reads one row of Get's columns (Get, ListEvents).
func scanEvent(row interface{ Scan(...any) error }) (exactlyonce.Event, error) {
	var (
		e                        exactlyonce.Event
		value, by, lastError     sql.NullString
		processedAt, nextAttempt sql.NullTime
		t                        taskColumns
	)
	err := row.Scan(&e.ID, &e.Kind, &value, &e.State, &e.CreatedAt, &processedAt, &by, &e.ProcessCount,
		&e.Attempts, &lastError, &nextAttempt, &t.url, &t.payload, &t.reference, &t.maxRetries, &t.hash, &t.position)
	if err != nil {
		return exactlyonce.Event{}, err
	}
	if value.Valid {
		e.Value = &value.String
	}
	if processedAt.Valid {
		e.ProcessedAt = &processedAt.Time
	}
	e.State = storedState(e.State)
	e.ProcessedBy = by.String
	e.LastError = lastError.String
	if nextAttempt.Valid && (e.State == exactlyonce.Pending || e.State == exactlyonce.Queued) {
		e.NextAttemptAt = &nextAttempt.Time
	}
	e.Task = t.task(e.Kind)
	return e, nil
}

func scanIDs(rows *sql.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func unique(ids []int64) []int64 {
	seen := make(map[int64]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// interpret maps a driver error to a domain error once, here: a database that cannot be reached
// becomes EUNAVAILABLE (the caller may retry); anything else stays internal. The original error is
// kept for logs; exactlyonce.ErrorMessage never shows it to a caller.
func interpret(op string, err error) error {
	if err == nil {
		return nil
	}
	var de *exactlyonce.Error
	if errors.As(err, &de) {
		return err
	}
	var ne net.Error
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn), errors.As(err, &ne),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, sql.ErrConnDone):
		return &unavailableError{op: op, err: err}
	case errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errLockWaitTimeout ||
		me.Number == 1040 /* too many connections */ || me.Number == 1053 /* server shutdown */):
		return &unavailableError{op: op, err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// unavailableError is an EUNAVAILABLE domain error that keeps the driver error for logs.
type unavailableError struct {
	op  string
	err error
}

func (e *unavailableError) Error() string { return e.op + ": database unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() []error {
	return []error{e.err, exactlyonce.Errorf(exactlyonce.EUNAVAILABLE, "the database is unavailable; try again")}
}
