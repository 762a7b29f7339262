package eventstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// The exact count of events (internal/mysql/migrations/0005_settled_count.sql, count.sql). Settled events are
// written in the `fresh` partition (states 10 and 20) and folded by the sweeper into `settled`
// (states 30 and 40) in transactions that add what they moved to settled_count's one row, so that
// GET /events reads that row plus a scan of `open` and `fresh`: a cost set by the pending events and
// the events settled since the last fold, never by the history.

// CountedShift is what a fold adds to a settled state: 10 (processed) becomes 30, 20 (failed) 40.
const CountedShift = 20

// storedState is the domain state of a stored state: a counted state reads as the state it was
// before the fold. Callers never see the difference.
func StoredState(s exactlyonce.State) exactlyonce.State {
	if s >= exactlyonce.Processed+CountedShift {
		return s - CountedShift
	}
	return s
}

// AddSettled adds n folded events to settled_count, in tx (AddSettled: the fold's second statement,
// and how the benchmark's seeding counts the history it loads folded).
func AddSettled(ctx context.Context, tx mysql.Conn, n int64) (sql.Result, error) {
	return tx.ExecContext(ctx, queries.AddSettled, n)
}

// DefaultFoldBatch is the most rows one fold transaction moves: about 50-100 ms of row moves on the
// machine of docs/performance.md, short enough that its row locks (which nobody else wants) and its
// undo stay small.
const DefaultFoldBatch = 5000

// Count returns the number of events, pending and settled: exact.
//
// It takes a shared lock on settled_count's row and then counts `open` and `fresh` by a consistent
// read, in one READ COMMITTED transaction. A fold commits its move and its addition together while
// holding the row's exclusive lock, so no fold can commit between the two reads, and every fold
// that committed before the lock is seen whole by the count that follows it. Reading both in one
// snapshot instead (one statement, or a REPEATABLE READ transaction WITH CONSISTENT SNAPSHOT) is
// not enough on MariaDB 10.11: under concurrent folds such a snapshot read the count's row with a
// fold's addition and the events without its move (TestCountAndOverviewNeverSeeAFoldHalfway saw 3,001-3,007
// of 3,000).
func (s *Store) Count(ctx context.Context) (int64, error) {
	var counted sql.NullInt64
	var open int64
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, queries.LockSettledCount).Scan(&counted); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, queries.CountUnfolded).Scan(&open)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, mysql.Interpret("count events", fmt.Errorf("settled_count has no row: the schema is not migrated"))
	}
	if err != nil {
		return 0, mysql.Interpret("count events", err)
	}
	return counted.Int64 + open, nil
}

// FoldSettled moves up to limit settled events into the counted `settled` partition and adds them
// to settled_count, in one transaction, and returns how many it moved. Zero means nothing was left
// to fold. Safe to run from many processes at once: each row is moved and counted by one fold.
func (s *Store) FoldSettled(ctx context.Context, limit int) (int64, error) {
	if limit < 1 {
		return 0, fmt.Errorf("fold settled events: limit %d; want at least 1", limit)
	}
	var moved int64
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		foldStep(ctx, tx, "FoldSettled")
		res, err := tx.ExecContext(ctx, queries.FoldSettled, limit)
		if err != nil {
			return err
		}
		if moved, err = res.RowsAffected(); err != nil || moved == 0 {
			return err
		}
		foldStep(ctx, tx, "AddSettled")
		res, err = AddSettled(ctx, tx, moved)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("settled_count has %d rows; it must have exactly one (migrate re-creates a lost one)", n)
		}
		foldStep(ctx, tx, "Commit")
		return nil
	})
	if err != nil {
		return 0, mysql.Interpret("fold settled events", err)
	}
	return moved, nil
}

// foldStepKey is the context key of WithFoldSteps' function.
type foldStepKey struct{}

// WithFoldSteps returns ctx carrying f: a fold run under it (FoldSettled) calls f with its
// transaction before each of its statements, named as in count.sql ("FoldSettled", "AddSettled"),
// and before it commits ("Commit"); a fold that moved nothing stops after its first. Only tests set
// one: they kill the process that folds between two steps, or hold a fold there while another runs.
func WithFoldSteps(ctx context.Context, f func(tx *sql.Tx, step string)) context.Context {
	return context.WithValue(ctx, foldStepKey{}, f)
}

func foldStep(ctx context.Context, tx *sql.Tx, step string) {
	if f, ok := ctx.Value(foldStepKey{}).(func(*sql.Tx, string)); ok {
		f(tx, step)
	}
}
