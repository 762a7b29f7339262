package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Allocation strategies, chosen by configuration (ALLOCATOR).
const (
	// AllocatorBlock reserves BlockSize ids per status-row transaction and hands them out from memory,
	// reserving the next block when half of the current one is used, so that no writer waits for
	// the counter. The counter's lock is held for one short transaction per block instead of one per
	// event. A block reserved more than BlockMaxAge ago is dropped at the next create, which
	// reserves a fresh one. Trade-off: ids reserved by a process that stops, or dropped for their
	// age, are never used (gaps of up to one and a half blocks per process, and per drop), and ids
	// are not in creation order across processes.
	AllocatorBlock = "block"
	// AllocatorLiteral is the seed's shape: one transaction locks the status row, advances it by one
	// and inserts the event, so the counter's lock is held through the insert and the commit. Dense,
	// ordered ids; every writer in the system serialises on one row lock. The baseline to compare.
	AllocatorLiteral = "literal"
	// DefaultAllocator is the strategy a Config without one gets.
	DefaultAllocator = AllocatorBlock
)

// DefaultBlockSize is the ids AllocatorBlock reserves per status-row transaction by default: at
// 10,000-20,000 inserts/s per process, a reservation every 50-100 ms, with the other half block
// (25-50 ms of inserts) as headroom while the next one is reserved (docs/performance.md).
const DefaultBlockSize = 1024

// DefaultBlockMaxAge is how long AllocatorBlock hands out the ids of a block after it reserved it:
// at the first create after that, the block (and the one reserved ahead) is dropped, its unused ids
// become gaps, and a fresh block is reserved. Without it, a process that creates rarely (an API's
// Lambda execution environment serving a request every few minutes) used one block for hours, each
// of its events a late event of a page packed, and moved to the archive, long before: every one
// made the page young again and stopped the archive's move there for a retention window
// (docs/history.md, "Late events"). Ten minutes is a twelfth of the default retention window
// (HISTORY_RETENTION, 2h): a late event comes at most ten minutes after its block, so a page is
// held at most that much past its window. It is long enough that a process creating at least once a
// block's ids per ten minutes (1,024 ids: under 2 events/s) never drops one, and one creating less
// pays one short counter transaction per create after ten idle minutes, and at most one and a half
// blocks of gaps (about 220,000 ids a day at most, a few empty pages).
const DefaultBlockMaxAge = 10 * time.Minute

// allocator hands out ids from the status row; it inserts nothing. The caller inserts the rows that
// use them, in its own transaction (with whatever else must commit atomically with them: an
// idempotency key, a task's metadata) or, for one row or one multi-row INSERT, in one autocommit
// statement.
type allocator interface {
	// take returns the next n ids. tx is the caller's transaction, or nil when the caller writes
	// with one autocommit statement; only a strategy whose inTx is true uses it.
	take(ctx context.Context, tx Conn, n int) ([]int64, error)
	// inTx tells whether take must run in the caller's transaction, because it advances the counter
	// there and holds the counter's lock until that transaction ends (the literal strategy).
	inTx() bool
}

var errNoCounter = errors.New("status table has no row: the schema is not migrated")

// TakeIDs returns the next n event ids of the id counter. tx is the caller's transaction, or nil
// when the caller writes the rows that use them with one autocommit statement: only an allocator
// whose IDsInTx is true takes them in it (and needs it). Ids taken and never used (a transaction
// that rolled back, a process that stopped) are gaps: never duplicates.
func (d *DB) TakeIDs(ctx context.Context, tx Conn, n int) ([]int64, error) {
	return d.alloc.take(ctx, tx, n)
}

// IDsInTx tells whether TakeIDs must run in the caller's transaction, because it advances the
// counter there and holds the counter's lock until that transaction ends (AllocatorLiteral). When
// it is false (AllocatorBlock), a caller takes its ids before its transaction begins: a refill of
// the allocator inside it would need a second connection while the transaction holds its locks.
func (d *DB) IDsInTx() bool { return d.alloc.inTx() }

// AdvanceCounter takes n consecutive ids from the counter inside tx, and returns the first: it locks
// the counter's row (held until tx ends), reads it and advances it. For what must take its ids in
// its own transaction whatever the allocator (an agent's registration, the benchmark's loads).
func AdvanceCounter(ctx context.Context, tx Conn, n int64) (first int64, err error) {
	return lockAndAdvance(ctx, tx, n)
}

// ReadIDCounter reads the id counter by a consistent read, without a lock: every id at or below it
// has been handed out, and it only grows.
func (d *DB) ReadIDCounter(ctx context.Context) (int64, error) {
	var counter int64
	err := d.pool.QueryRowContext(ctx, queries.ReadCounter).Scan(&counter)
	return counter, err
}

// lockAndAdvance takes n ids from the counter inside tx: it locks the row, reads it and advances it.
// The ids taken are (old, old+n].
func lockAndAdvance(ctx context.Context, tx Conn, n int64) (first int64, err error) {
	var old int64
	if err := tx.QueryRowContext(ctx, queries.LockCounter).Scan(&old); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, errNoCounter
		}
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, queries.AdvanceCounter, n); err != nil {
		return 0, err
	}
	return old + 1, nil
}

type literalAllocator struct{}

// take advances the counter by n in the caller's transaction, whose commit (or rollback) ends the
// counter's lock: the seed's shape, where every writer queues behind the one before it.
func (a *literalAllocator) take(ctx context.Context, tx Conn, n int) ([]int64, error) {
	if tx == nil {
		return nil, errors.New("the literal allocator takes ids in the caller's transaction; none was given")
	}
	first, err := lockAndAdvance(ctx, tx, int64(n))
	if err != nil {
		return nil, err
	}
	return idRun(first, n), nil
}

func (a *literalAllocator) inTx() bool { return true }

// blockAllocator hands out ids from blocks reserved on the counter, and reserves the next block
// while half of the current one is still unused, so that clients never queue behind the counter.
//
// The reservation that refills it is single-flight and runs in the goroutine of the caller that
// crossed the half-way mark, inside its request: that caller pays one short transaction; the others
// go on taking ids from what is left. Nothing runs in the background, which matters on Lambda: an
// execution environment is frozen between invocations, and a reservation frozen halfway would hold
// the counter's row lock, and so every writer in the system, until it thawed. Only when a block is
// used up before its successor arrives do callers wait, on the reservation in flight, not on the lock.
//
// Ids reserved and not used when the process ends are never used (at most one and a half blocks per
// process): gaps, never duplicates. So are those of a block older than maxAge, which the first
// take after that drops (with the spare, reserved after it but aged on its own clock): a process's
// ids are never more than maxAge older than the counter it could read.
type blockAllocator struct {
	db     *sql.DB
	stats  *Stats
	retry  RetryPolicy
	size   int64
	maxAge time.Duration
	now    func() time.Time // time.Now; the tests' clock

	mu       sync.Mutex
	cur      idRange      // ids being handed out
	spare    idRange      // the next block, reserved ahead; empty when none
	inflight *reservation // the reservation being made, if any
}

// idRange is the ids [next, stop), reserved at at.
type idRange struct {
	next, stop int64
	at         time.Time
}

func (r idRange) left() int64 { return r.stop - r.next }

// reservation is one refill in flight; done is closed when it has ended, with err set if it failed.
type reservation struct {
	done chan struct{}
	err  error
}

// take hands out n ids from the reserved blocks; the caller's transaction, if any, is not used:
// a reservation commits on its own, so that the counter's lock is never held for a caller.
func (a *blockAllocator) take(ctx context.Context, _ Conn, n int) ([]int64, error) {
	if int64(n)*4 > a.size {
		// A quarter of a block or more: a few such requests would drain each block as it arrives,
		// and their callers would wait on refill after refill. They take their own range instead.
		return a.direct(ctx, n)
	}
	return a.fromBlocks(ctx, n)
}

func (a *blockAllocator) inTx() bool { return false }

// direct takes n consecutive ids straight from the counter, in a transaction of their own.
func (a *blockAllocator) direct(ctx context.Context, n int) ([]int64, error) {
	first, err := a.advance(ctx, int64(n))
	if err != nil {
		return nil, err
	}
	return idRun(first, n), nil
}

// advance takes n consecutive ids from the counter in a transaction of its own, and returns the
// first.
func (a *blockAllocator) advance(ctx context.Context, n int64) (first int64, err error) {
	err = inTx(ctx, a.db, a.stats, a.retry, func(tx *sql.Tx) error {
		first, err = lockAndAdvance(ctx, tx, n)
		return err
	})
	return first, err
}

// idRun returns the n consecutive ids starting at first.
func idRun(first int64, n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = first + int64(i)
	}
	return ids
}

// maxTakeRounds bounds the loop in fromBlocks: a caller waits for at most this many refills. Every round
// is a refill that others took ids from, so the system makes progress; the bound only stops a caller
// that keeps losing the race for fresh blocks (tiny blocks, many clients) from waiting forever. It
// is high because losing is not an error: 100 was reached by a test with 16-id blocks, 64 clients
// and batches of several ids under the race detector.
const maxTakeRounds = 2000

// fromBlocks hands out the next n ids. They are consecutive unless they straddle two blocks.
func (a *blockAllocator) fromBlocks(ctx context.Context, n int) ([]int64, error) {
	ids := make([]int64, 0, n)
	for round := range maxTakeRounds {
		a.mu.Lock()
		if round == 0 {
			// Only before the first id: a block reserved while this caller waited is fresh enough,
			// and checking again could drop it under a tiny maxAge, round after round.
			a.dropOld()
		}
		for len(ids) < n {
			if a.cur.left() <= 0 && a.spare.left() > 0 {
				a.cur, a.spare = a.spare, idRange{}
			}
			k := min(int64(n-len(ids)), a.cur.left())
			if k <= 0 {
				break
			}
			for id := a.cur.next; id < a.cur.next+k; id++ {
				ids = append(ids, id)
			}
			a.cur.next += k
		}
		if len(ids) == n {
			var refill *reservation
			if a.cur.left() <= a.size/2 && a.spare.left() <= 0 && a.inflight == nil {
				refill = &reservation{done: make(chan struct{})}
				a.inflight = refill
			}
			a.mu.Unlock()
			if refill != nil {
				// Prefetch. The ids are ours whatever happens; a failed prefetch is retried by the next
				// caller past the mark, and surfaces only if the block runs dry.
				a.reserve(ctx, refill)
			}
			return ids, nil
		}
		// Dry: keep the ids taken so far, and wait for the refill in flight, or make it.
		res, mine := a.inflight, false
		if res == nil {
			res, mine = &reservation{done: make(chan struct{})}, true
			a.inflight = res
		}
		a.mu.Unlock()
		if mine {
			a.reserve(ctx, res)
		} else {
			select {
			case <-res.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if res.err != nil {
			return nil, fmt.Errorf("reserve ids: %w", res.err)
		}
	}
	return nil, fmt.Errorf("reserve ids: the counter's blocks ran out %d times while waiting", maxTakeRounds)
}

// dropOld drops the blocks reserved more than maxAge ago; a.mu is held. Their unused ids are
// gaps. A reservation in flight is left alone: its block is fresh.
func (a *blockAllocator) dropOld() {
	if a.maxAge <= 0 {
		return
	}
	now := a.now()
	if a.cur.left() > 0 && now.Sub(a.cur.at) > a.maxAge {
		a.cur = idRange{}
	}
	if a.spare.left() > 0 && now.Sub(a.spare.at) > a.maxAge {
		a.spare = idRange{}
	}
}

// reserveTimeout bounds one reservation, which runs on behalf of every caller waiting for it.
const reserveTimeout = 10 * time.Second

// reserve takes a block from the counter into spare and ends res. Other callers may be waiting for
// it, so the caller who runs it cannot cancel it by going away: it runs on its own deadline.
func (a *blockAllocator) reserve(ctx context.Context, res *reservation) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reserveTimeout)
	defer cancel()
	first, err := a.advance(ctx, a.size)
	a.mu.Lock()
	if err == nil {
		// Aged from the commit: the ids are above every id handed out before it.
		a.spare = idRange{next: first, stop: first + a.size, at: a.now()}
	}
	res.err = err
	a.inflight = nil
	a.mu.Unlock()
	close(res.done)
}
