package eventstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// The exact count of events (count.sql): the tally (migrations/0018_event_tally.sql), which every
// create adds its events to in its own transaction, plus a base for the events created before it.
//
// settled_count (0005) is the events folded: settled events are written in the `fresh` partition
// (states 10 and 20) and folded by the sweeper into `settled` (states 30 and 40) in transactions
// that add what they moved to its one row. The overview reads it with a scan of what is not folded,
// and so did the count before the tally's base was derived.

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

// TallyShards is the tally's rows (migrations/0018_event_tally.sql).
const TallyShards = 64

// TallyCreated adds n events, the first of which has id first, to the tally, in tx: the last
// statement of every transaction that inserts events, so that the events and their count commit
// together. The row is the first id's shard: concurrent creates, whose ids differ, rarely meet on
// one.
func TallyCreated(ctx context.Context, tx mysql.Conn, first int64, n int) error {
	res, err := tx.ExecContext(ctx, queries.TallyCreated, n, first%TallyShards)
	if err != nil {
		return err
	}
	if rows, err := res.RowsAffected(); err != nil {
		return err
	} else if rows != 1 {
		return fmt.Errorf("event_tally has %d rows for shard %d; it must have one (the schema is not migrated?)", rows, first%TallyShards)
	}
	return nil
}

// Count returns the number of events, pending and settled: exact.
//
// Once the tally's base is derived (DeriveTallyBase), it is the base plus the tally's 64 rows, read
// by one statement: each create adds its events to the tally in the transaction that inserts them,
// so one consistent read sees every committed create whole and no other, whatever has been folded.
//
// Until then (the 15 minutes after migration 0018 on a database with history), it is
// settled_count plus a scan of `open`, `queued` and `fresh`, in one READ COMMITTED transaction: a
// shared lock on settled_count's row first, then the scan by a consistent read. A fold commits its
// move and its addition together while holding the row's exclusive lock, so no fold can commit
// between the two reads, and every fold that committed before the lock is seen whole by the scan.
// Reading both in one snapshot instead is not enough on MariaDB 10.11: under concurrent folds such
// a snapshot read the count's row with a fold's addition and the events without its move
// (TestCountNeverSeesAFoldHalfway saw 3,001-3,007 of 3,000).
func (s *Store) Count(ctx context.Context) (int64, error) {
	var base sql.NullInt64
	var tally int64
	if err := s.db.QueryRowContext(ctx, queries.ReadTally).Scan(&base, &tally); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			err = errors.New("event_tally_base has no row: the schema is not migrated")
		}
		return 0, mysql.Interpret("count events", err)
	}
	if base.Valid {
		return base.Int64 + tally, nil
	}
	return s.countByScan(ctx)
}

// countByScan is the count before the tally's base is derived: settled_count plus the scan.
func (s *Store) countByScan(ctx context.Context) (int64, error) {
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

// DeriveTallyBase derives the tally's base once, if it may (migration 0018's begin_after has
// passed) and no other sweeper holds it, and tells whether the base is known. The base is the
// events no create has tallied (those created before the creates kept the tally): the count by the
// scan less the tally, read in one transaction under settled_count's shared lock, the scan and the
// tally's sum by one statement, so one consistent read: a create committing meanwhile is in both or
// in neither. It scans the pending and unfolded events once; after it, Count reads 65 rows.
func (s *Store) DeriveTallyBase(ctx context.Context) (bool, error) {
	known := false
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		var base sql.NullInt64
		var may bool
		err := tx.QueryRowContext(ctx, queries.TakeTallyBase).Scan(&base, &may)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // another sweeper holds it
		}
		if err != nil {
			return err
		}
		if base.Valid {
			known = true
			return nil
		}
		if !may {
			return nil
		}
		var counted sql.NullInt64
		if err := tx.QueryRowContext(ctx, queries.LockSettledCount).Scan(&counted); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return errors.New("settled_count has no row: the schema is not migrated")
			}
			return err
		}
		var unfolded, tally int64
		if err := tx.QueryRowContext(ctx, queries.CountUnfoldedAndTally).Scan(&unfolded, &tally); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, queries.SetTallyBase, counted.Int64+unfolded-tally); err != nil {
			return err
		}
		known = true
		return nil
	})
	if err != nil {
		return false, mysql.Interpret("derive the tally's base", err)
	}
	return known, nil
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
		res, err := tx.ExecContext(ctx, queries.FoldSettled, limit)
		if err != nil {
			return err
		}
		if moved, err = res.RowsAffected(); err != nil || moved == 0 {
			return err
		}
		res, err = AddSettled(ctx, tx, moved)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("settled_count has %d rows; it must have exactly one (migrate re-creates a lost one)", n)
		}
		return nil
	})
	if err != nil {
		return 0, mysql.Interpret("fold settled events", err)
	}
	return moved, nil
}
