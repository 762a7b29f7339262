package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// Allocation strategies, chosen by configuration (ALLOCATOR).
const (
	// AllocatorBlock reserves BlockSize ids per status-row transaction and hands them out from memory.
	// The counter's lock is held for one short transaction per block instead of one per event, so
	// writers barely contend on it. Trade-off: ids reserved by a process that stops are never used
	// (gaps in the sequence), and ids are not in creation order across processes.
	AllocatorBlock = "block"
	// AllocatorLiteral is the seed's shape: one transaction locks the status row, advances it by one
	// and inserts the event, so the counter's lock is held through the insert and the commit. Dense,
	// ordered ids; every writer in the system serialises on one row lock. The baseline to compare.
	AllocatorLiteral = "literal"
)

// execer is what an insert needs: a transaction or the pool.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// allocator hands out ids from the status row. create takes the next id and runs insert with it;
// a strategy may run insert inside its own allocation transaction.
type allocator interface {
	create(ctx context.Context, insert func(context.Context, execer, int64) error) (int64, error)
}

var errNoCounter = errors.New("status table has no row: the schema is not migrated")

// lockAndAdvance takes n ids from the counter inside tx: it locks the row, reads it and advances it.
// The ids taken are (old, old+n].
func lockAndAdvance(ctx context.Context, tx *sql.Tx, n int64) (first int64, err error) {
	var old int64
	if err := tx.QueryRowContext(ctx, query("LockCounter")).Scan(&old); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, errNoCounter
		}
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, query("AdvanceCounter"), n); err != nil {
		return 0, err
	}
	return old + 1, nil
}

type literalAllocator struct {
	db    *sql.DB
	stats *Stats
	retry RetryPolicy
}

func (a *literalAllocator) create(ctx context.Context, insert func(context.Context, execer, int64) error) (int64, error) {
	var id int64
	err := inTx(ctx, a.db, a.stats, a.retry, func(tx *sql.Tx) error {
		first, err := lockAndAdvance(ctx, tx, 1)
		if err != nil {
			return err
		}
		id = first
		return insert(ctx, tx, id)
	})
	return id, err
}

type blockAllocator struct {
	db    *sql.DB
	stats *Stats
	retry RetryPolicy
	size  int64

	mu         sync.Mutex
	next, stop int64 // ids [next, stop) are reserved and unused
}

func (a *blockAllocator) create(ctx context.Context, insert func(context.Context, execer, int64) error) (int64, error) {
	id, err := a.take(ctx)
	if err != nil {
		return 0, err
	}
	// A failed insert loses this id: a gap, never a duplicate.
	return id, insert(ctx, a.db, id)
}

func (a *blockAllocator) take(ctx context.Context) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next >= a.stop {
		// Reserve while holding the mutex: goroutines that run dry at the same moment queue here and
		// share the one block instead of each taking the counter's lock.
		var first int64
		err := inTx(ctx, a.db, a.stats, a.retry, func(tx *sql.Tx) error {
			var err error
			first, err = lockAndAdvance(ctx, tx, a.size)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("reserve ids: %w", err)
		}
		a.next, a.stop = first, first+a.size
	}
	id := a.next
	a.next++
	return id, nil
}
