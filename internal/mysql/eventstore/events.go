package eventstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/routing"
)

// Store reads and writes events: the plain creates, an event, the listings, the count and its
// fold, the waiting gauges, and the claims with their leases and settlements. Safe for concurrent
// use; build one per process, on the process's core handle.
type Store struct {
	core    *mysql.DB
	db      *sql.DB
	history pagestore.History // the packed history's tiers: page rows, then the archive (WithHistory)

	// ClaimDue's place in the subpartitions of `open` (claimFrom): whether its last claim was full,
	// and the rotation it then follows.
	dueFull atomic.Bool
	dueNext atomic.Uint32
}

// New returns the Store on db, reading the packed history in the database only.
func New(db *mysql.DB) *Store {
	s := &Store{core: db, db: db.Pool()}
	s.dueNext.Store(rand.Uint32())
	return s
}

// WithHistory makes s read the packed history through h (its archive too), and returns s. Called
// once, when the process builds its stores (internal/wire), before s is used.
func (s *Store) WithHistory(h pagestore.History) *Store {
	s.history = h
	return s
}

// History is the packed history's reader s reads through (its tiers).
func (s *Store) History() pagestore.History { return s.history }

// CreateProcessed stores a new event that is processed from birth, with the given value.
func (s *Store) CreateProcessed(ctx context.Context, value string) (exactlyonce.Event, error) {
	ids, err := s.write(ctx, 1, insertProcessed(value))
	if err != nil {
		return exactlyonce.Event{}, mysql.Interpret("create event", err)
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
	ids, err := s.write(ctx, n, InsertPending)
	if err != nil {
		return nil, mysql.Interpret("create pending event", err)
	}
	return ids, nil
}

// write takes n ids and inserts the rows that use them with insert. With an allocator that takes
// ids outside any transaction (block), the insert is one autocommit statement, atomic by itself:
// no BEGIN and COMMIT round trips on the hot path. With one that takes them in the caller's
// transaction (literal), both run in one transaction of the store's.
func (s *Store) write(ctx context.Context, n int, insert func(context.Context, mysql.Conn, []int64) error) ([]int64, error) {
	if !s.core.IDsInTx() {
		ids, err := s.core.TakeIDs(ctx, nil, n)
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
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		if ids, err = s.core.TakeIDs(ctx, tx, n); err != nil {
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
	err := s.core.InTx(ctx, func(tx *sql.Tx) error { return fn(ctx, &Tx{store: s, tx: tx}) })
	return mysql.Interpret("write transaction", err)
}

// CreatePending inserts n new pending events in the transaction and returns their ids.
func (t *Tx) CreatePending(ctx context.Context, n int) ([]int64, error) {
	if err := checkPendingBatch(n); err != nil {
		return nil, err
	}
	ids, err := t.store.core.TakeIDs(ctx, t.tx, n)
	if err != nil {
		return nil, err
	}
	return ids, InsertPending(ctx, t.tx, ids)
}

// CreateProcessed inserts a new event, processed from birth with value, in the transaction.
func (t *Tx) CreateProcessed(ctx context.Context, value string) (exactlyonce.Event, error) {
	ids, err := t.store.core.TakeIDs(ctx, t.tx, 1)
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

// expandEventRows replaces the /*rows*/ marker with one row per id (a tuple whose two placeholders
// are the event's id and its routing hash), and returns those as arguments.
func expandEventRows(q, row string, ids []int64) (string, []any) {
	rows := strings.TrimSuffix(strings.Repeat(row+", ", len(ids)), ", ")
	args := make([]any, 0, 2*len(ids))
	for _, id := range ids {
		args = append(args, id, routing.EventHash(id))
	}
	return strings.Replace(q, "/*rows*/", rows, 1), args
}

// InsertPending inserts pending events with the ids given (taken from the id counter) in one
// statement (InsertPendingRows), on ex: what an async create writes, and how the benchmark's seeding
// loads pending events as if they had been created so.
func InsertPending(ctx context.Context, ex mysql.Conn, ids []int64) error {
	q, args := expandEventRows(queries.InsertPendingRows, "(?, ?, NULL, 0, NOW(6))", ids)
	_, err := ex.ExecContext(ctx, q, args...)
	return err
}

func insertProcessed(value string) func(context.Context, mysql.Conn, []int64) error {
	return func(ctx context.Context, ex mysql.Conn, ids []int64) error {
		_, err := ex.ExecContext(ctx, queries.InsertProcessed, ids[0], routing.EventHash(ids[0]), value)
		return err
	}
}

func processedEvent(id int64, value string) exactlyonce.Event {
	return exactlyonce.Event{ID: id, Kind: exactlyonce.KindPlain, Value: &value, State: exactlyonce.Processed,
		ProcessedBy: exactlyonce.ByAPI, ProcessCount: 1}
}

// betweenTiersKey is the context key of WithBetweenTiers.
type betweenTiersKey struct{}

// WithBetweenTiers returns a context under which Get calls f between its two reads: after its read
// of `events` and before its read of the packed history. How a test packs an event at that moment
// (pagestore's TestAReadBetweenTheTiersMissesNoEvent); nothing else sets it.
func WithBetweenTiers(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, betweenTiersKey{}, f)
}

// Get returns one event, or an ENOTFOUND error. A task comes with its webhook (Event.Task).
func (s *Store) Get(ctx context.Context, id int64) (exactlyonce.Event, error) {
	e, err := scanEvent(s.db.QueryRowContext(ctx, queries.Get, id))
	if errors.Is(err, sql.ErrNoRows) {
		// Not in `events`: packed (pages.go), archived, or unknown. `events` is read first: a pack
		// inserts the page and deletes the event in one transaction, so an event missing from the
		// first read was packed before it, and its page is there for the second; the move to the
		// archive writes the page's object before it deletes its rows (pagestore.History).
		if f, ok := ctx.Value(betweenTiersKey{}).(func()); ok {
			f()
		}
		r, ok, perr := s.history.Get(ctx, s.db, id)
		if perr != nil {
			return exactlyonce.Event{}, mysql.Interpret("get event", perr)
		}
		if !ok {
			return exactlyonce.Event{}, exactlyonce.Errorf(exactlyonce.ENOTFOUND, "event %d not found", id)
		}
		return PackedEvent(r), nil
	}
	if err != nil {
		return exactlyonce.Event{}, mysql.Interpret("get event", err)
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
	e.State = StoredState(e.State)
	e.ProcessedBy = by.String
	e.LastError = lastError.String
	if nextAttempt.Valid && (e.State == exactlyonce.Pending || e.State == exactlyonce.Queued) {
		e.NextAttemptAt = &nextAttempt.Time
	}
	e.Task = t.task(e.Kind)
	return e, nil
}

// PackedEvent is the event a packed row (pagestore) is, as Get returns it.
func PackedEvent(r pages.Row) exactlyonce.Event {
	e := exactlyonce.Event{ID: r.ID, Kind: exactlyonce.Kind(r.Kind), Value: r.Value, State: StoredState(exactlyonce.State(r.State)),
		CreatedAt: r.CreatedAt, ProcessedAt: r.ProcessedAt, ProcessCount: int(r.ProcessCount), Attempts: int(r.Attempts)}
	if r.ProcessedBy != nil {
		e.ProcessedBy = *r.ProcessedBy
	}
	if r.LastError != nil {
		e.LastError = *r.LastError
	}
	t := taskColumns{payload: r.Payload, hash: r.RoutingHash}
	t.url = nullString(r.URL)
	t.reference = nullString(r.ReferenceID)
	t.worker = nullString(r.WorkerID)
	if r.MaxRetries != nil {
		t.maxRetries = sql.NullInt64{Int64: *r.MaxRetries, Valid: true}
	}
	if r.Position != nil {
		t.position = sql.NullInt64{Int64: *r.Position, Valid: true}
	}
	e.Task = t.task(e.Kind)
	return e
}

func nullString(s *string) sql.NullString {
	if s == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *s, Valid: true}
}
