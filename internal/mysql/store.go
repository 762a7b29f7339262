package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
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
}

// NewStore returns a Store on db, which must be migrated (see Migrate).
func NewStore(db *sql.DB, cfg StoreConfig) (*Store, error) {
	s := &Store{db: db, stats: &Stats{}, retry: cfg.Retry.withDefaults()}
	switch cmp.Or(cfg.Allocator, DefaultAllocator) {
	case AllocatorBlock:
		size := cmp.Or(cfg.BlockSize, DefaultBlockSize)
		if size < 1 {
			return nil, fmt.Errorf("allocator block size must be positive, got %d", size)
		}
		s.alloc = &blockAllocator{db: db, stats: s.stats, retry: s.retry, size: int64(size)}
	case AllocatorLiteral:
		s.alloc = &literalAllocator{db: db, stats: s.stats, retry: s.retry}
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
	ids, err := s.alloc.create(ctx, 1, func(ctx context.Context, ex execer, ids []int64) error {
		_, err := ex.ExecContext(ctx, query("InsertProcessed"), ids[0], value)
		return err
	})
	if err != nil {
		return exactlyonce.Event{}, interpret("create event", err)
	}
	return exactlyonce.Event{ID: ids[0], Value: &value, State: exactlyonce.Processed, ProcessedBy: exactlyonce.ByAPI, ProcessCount: 1}, nil
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
	if n < 1 || n > MaxPendingBatch {
		return nil, fmt.Errorf("create pending events: %d events; one batch is 1 to %d", n, MaxPendingBatch)
	}
	ids, err := s.alloc.create(ctx, n, func(ctx context.Context, ex execer, ids []int64) error {
		q, args := expandRows(query("InsertPendingRows"), "(?, NULL, 0, NOW(6))", ids)
		_, err := ex.ExecContext(ctx, q, args...)
		return err
	})
	if err != nil {
		return nil, interpret("create pending event", err)
	}
	return ids, nil
}

// Get returns one event, or an ENOTFOUND error.
func (s *Store) Get(ctx context.Context, id int64) (exactlyonce.Event, error) {
	var (
		e           exactlyonce.Event
		value, by   sql.NullString
		processedAt sql.NullTime
	)
	err := s.db.QueryRowContext(ctx, query("Get"), id).
		Scan(&e.ID, &value, &e.State, &e.CreatedAt, &processedAt, &by, &e.ProcessCount)
	if errors.Is(err, sql.ErrNoRows) {
		return exactlyonce.Event{}, exactlyonce.Errorf(exactlyonce.ENOTFOUND, "event %d not found", id)
	}
	if err != nil {
		return exactlyonce.Event{}, interpret("get event", err)
	}
	if value.Valid {
		e.Value = &value.String
	}
	if processedAt.Valid {
		e.ProcessedAt = &processedAt.Time
	}
	e.ProcessedBy = by.String
	return e, nil
}

// Count returns the number of events, pending and processed.
func (s *Store) Count(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, query("Count")).Scan(&n); err != nil {
		return 0, interpret("count events", err)
	}
	return n, nil
}

// ProcessIDs processes the named pending events that nobody else holds, in one transaction, giving
// each the value newValue returns, and says for every id what happened. An id may appear more than
// once; it is processed at most once. The error is for the transaction as a whole: when it is not
// nil, nothing was written.
func (s *Store) ProcessIDs(ctx context.Context, ids []int64, by string, newValue func(int64) string) (map[int64]exactlyonce.Outcome, error) {
	ids = unique(ids)
	out := make(map[int64]exactlyonce.Outcome, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var claimed []int64
	err := inTx(ctx, s.db, s.stats, s.retry, func(tx *sql.Tx) error {
		var err error
		if claimed, err = claimIDs(ctx, tx, ids); err != nil {
			return err
		}
		return markProcessed(ctx, tx, claimed, by, newValue)
	})
	if err != nil {
		return nil, interpret("process events", err)
	}
	for _, id := range claimed {
		out[id] = exactlyonce.OutcomeSettled
	}
	var rest []int64
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			rest = append(rest, id)
		}
	}
	if len(rest) == 0 {
		return out, nil
	}
	q, args := expandIDs(query("States"), rest)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		// The processing committed; only the classification of the others failed. Treat them as busy:
		// their messages are retried and will find them settled or claimable.
		for _, id := range rest {
			out[id] = exactlyonce.OutcomeBusy
		}
		return out, nil
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var st exactlyonce.State
		if err := rows.Scan(&id, &st); err != nil {
			return nil, interpret("process events", err)
		}
		if st >= exactlyonce.Processed {
			out[id] = exactlyonce.OutcomeAlreadySettled
		} else {
			out[id] = exactlyonce.OutcomeBusy
		}
	}
	if err := rows.Err(); err != nil {
		return nil, interpret("process events", err)
	}
	for _, id := range rest {
		if _, ok := out[id]; !ok {
			out[id] = exactlyonce.OutcomeMissing
		}
	}
	return out, nil
}

// ProcessDue claims up to limit pending events older than grace that nobody else holds, processes
// them and commits, in one transaction. It returns how many it processed; fewer than limit means
// no more were due when it looked.
func (s *Store) ProcessDue(ctx context.Context, grace time.Duration, limit int, by string, newValue func(int64) string) (int, error) {
	var n int
	err := inTx(ctx, s.db, s.stats, s.retry, func(tx *sql.Tx) error {
		claimed, err := scanIDs(tx.QueryContext(ctx, query("ClaimDue"), grace.Microseconds(), limit))
		if err != nil {
			return err
		}
		n = len(claimed)
		return markProcessed(ctx, tx, claimed, by, newValue)
	})
	if err != nil {
		return 0, interpret("sweep events", err)
	}
	return n, nil
}

// claimAgain are the pauses before claimIDs asks again for pending events its claim skipped: at
// most len(claimAgain) more claims, about 30 ms in all. A row that another worker really holds
// stays locked through them (and costs its batch that much); a row that a scan held for an instant
// is claimed. Under CPU contention an instant can be a few milliseconds: a thread holding a row's
// lock for the length of one comparison can be descheduled.
var claimAgain = []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond}

// claimIDs locks those of ids that are pending and that no other transaction holds, in tx, and
// returns them. A locking scan by another worker holds each row it passes for an instant, so SKIP
// LOCKED may skip a row that nobody is processing; such a false "busy" would cost the event a
// whole visibility timeout on the queue (and count towards its dead-letter limit). So the ids the
// claim skipped that a consistent read still finds pending are claimed again, a bounded number of
// times; a row another worker really holds stays locked through them and is reported busy.
func claimIDs(ctx context.Context, tx *sql.Tx, ids []int64) ([]int64, error) {
	var claimed []int64
	want := ids
	for try := 0; ; try++ {
		q, args := expandIDs(query("ClaimIDs"), want)
		got, err := scanIDs(tx.QueryContext(ctx, q, append(args, len(want))...))
		if err != nil {
			return nil, err
		}
		claimed = append(claimed, got...)
		if len(got) == len(want) || try == len(claimAgain) {
			return claimed, nil
		}
		// Of the rest, only those still pending can be claimed: the others are processed or unknown.
		q, args = expandIDs(query("PendingIDs"), without(want, got))
		if want, err = scanIDs(tx.QueryContext(ctx, q, args...)); err != nil {
			return nil, err
		}
		if len(want) == 0 {
			return claimed, nil
		}
		if pause := claimAgain[try]; pause > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(pause):
			}
		}
	}
}

// without returns the ids in all that are not in some.
func without(all, some []int64) []int64 {
	skip := make(map[int64]bool, len(some))
	for _, id := range some {
		skip[id] = true
	}
	var out []int64
	for _, id := range all {
		if !skip[id] {
			out = append(out, id)
		}
	}
	return out
}

// markChunk is the most events one MarkProcessed statement names: about 50 bytes of SQL each, so a
// statement stays well under 16 KB, beyond which RDS Proxy pins the client's session.
const markChunk = 200

// markProcessed writes the values of events claimed in tx, in statements of at most markChunk
// events. It fails, rolling everything back, if an update does not touch exactly the claimed rows
// it names: that would mean a lock did not hold.
func markProcessed(ctx context.Context, tx *sql.Tx, ids []int64, by string, newValue func(int64) string) error {
	for len(ids) > 0 {
		n := min(len(ids), markChunk)
		if err := markChunkProcessed(ctx, tx, ids[:n], by, newValue); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func markChunkProcessed(ctx context.Context, tx *sql.Tx, ids []int64, by string, newValue func(int64) string) error {
	var cases strings.Builder
	args := make([]any, 0, 3*len(ids)+2)
	for _, id := range ids {
		cases.WriteString("WHEN ? THEN ? ")
		args = append(args, id, newValue(id))
	}
	args = append(args, by)
	q, inArgs := expandIDs(strings.Replace(query("MarkProcessed"), "/*cases*/", cases.String(), 1), ids)
	res, err := tx.ExecContext(ctx, q, append(append(args, inArgs...), len(ids))...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != int64(len(ids)) {
		return fmt.Errorf("processed %d rows for %d claimed events", n, len(ids))
	}
	return nil
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
