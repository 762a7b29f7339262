package chaos

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	drv "github.com/go-sql-driver/mysql"
)

// contender plays a foreign transaction on the database (an operator's query, a batch job, a
// report that locks what it reads) so that the processes meet the two errors the store's retry
// helper retries, which the system alone does not produce: its claims skip locked rows and its
// other statements wait only briefly, in one order, so the chaos runs without it saw no deadlock
// and no lock wait timeout. Every session of the run waits at most Config.LockWaitTimeout for a
// row lock, and the contender holds its locks for longer (CHAOS_LOCK_HOLD), alternately:
//
//   - the counter's row lock: every id reservation of an API meanwhile waits, times out (1205) and
//     is retried;
//   - the pending events' row locks, then the leased events' row locks: a process settling leased
//     events (LockLeased, an UPDATE whose semi-consistent read passes the rows of others) waits
//     only for its own rows, and the contender asks for every leased row, holding those it got: a
//     settlement that meets one of its rows held waits and times out (1205), and is retried; when
//     the two wait for each other (a settlement locking its rows in more than one statement),
//     InnoDB breaks the cycle by rolling back the lighter transaction, and the contender has made
//     itself heavy first (it locked settled rows, which nothing else locks), so the process's is
//     rolled back (1213) and retried.
//
// The contender writes nothing and rolls back every transaction: it changes no row, and the
// invariants are checked as without it. Its statements are the fault, not the product's, so they
// live here rather than in internal/mysql/sql.
type contender struct {
	db   *sql.DB
	hold time.Duration

	holds     atomic.Int64 // transactions that held their locks for the whole hold
	deadlocks atomic.Int64 // deadlocks InnoDB resolved by rolling back the contender
	timeouts  atomic.Int64 // lock waits the contender lost
}

// Statements of the contender, each with the locks it takes.
const (
	// The counter's exclusive row lock, as an allocation takes it.
	contendCounter = "SELECT id FROM status FOR UPDATE"
	// Weight: exclusive locks on up to 5,000 settled rows, pruned to the settled partition. No
	// process locks a settled row, so these block nobody; they only make this transaction the
	// heavier one of any deadlock (InnoDB rolls back the one with fewer undo records and locks).
	contendWeight = "SELECT id FROM events WHERE state >= 10 LIMIT 5000 FOR UPDATE"
	// Half the pending events nobody holds, in every subpartition (they hash on id MOD 8; this takes
	// the ids whose bit 3 is 0), so that the processes go on claiming and leasing the other half,
	// whose rows lie between these in a scan's order. Claims skip the rows held (SKIP LOCKED) and
	// their messages come back later.
	contendPending = "SELECT id FROM events WHERE state = 0 AND id % 16 < 8 FOR UPDATE SKIP LOCKED"
	// Every leased event, waiting for those held: a process settling its leases holds some of them
	// while it waits for our pending rows.
	contendLeased = "SELECT id FROM events WHERE state = 1 FOR UPDATE"
)

// run contends until ctx ends: a hold, a pause of 0.5 to 1.5 holds, and again, alternately on the
// counter and on the events.
func (c *contender) run(ctx context.Context) {
	for i := 0; ; i++ {
		if err := sleep(ctx, c.hold/2+time.Duration(rand.Int64N(int64(c.hold)+1))); err != nil {
			return
		}
		hold := c.holdCounter
		if i%2 == 1 {
			hold = c.holdEvents
		}
		c.count(c.inTx(ctx, hold))
	}
}

// inTx runs fn in a READ COMMITTED transaction and rolls it back.
func (c *contender) inTx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	tx, err := c.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // it is the point: nothing is kept
	return fn(ctx, tx)
}

// holdCounter holds the counter's row lock for the whole hold.
func (c *contender) holdCounter(ctx context.Context, tx *sql.Tx) error {
	if err := drainRows(tx.QueryContext(ctx, contendCounter)); err != nil {
		return err
	}
	if err := sleep(ctx, c.hold); err != nil {
		return err
	}
	c.holds.Add(1)
	return nil
}

// holdEvents makes itself heavy, then for a third of the hold takes the pending events as they
// are created (every 20 ms: the newest rows, which come after the rows a settling process holds in
// its scan's order), then asks for the leased events, and holds it all until the hold is over.
func (c *contender) holdEvents(ctx context.Context, tx *sql.Tx) error {
	start := time.Now()
	if err := drainRows(tx.QueryContext(ctx, contendWeight)); err != nil {
		return err
	}
	for time.Since(start) < c.hold/3 {
		if err := drainRows(tx.QueryContext(ctx, contendPending)); err != nil {
			return err
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	if err := drainRows(tx.QueryContext(ctx, contendLeased)); err != nil {
		return err
	}
	if err := sleep(ctx, c.hold-time.Since(start)); err != nil {
		return err
	}
	c.holds.Add(1)
	return nil
}

func (c *contender) count(err error) {
	var me *drv.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213:
			c.deadlocks.Add(1)
		case 1205:
			c.timeouts.Add(1)
		}
	}
}

func drainRows(rows *sql.Rows, err error) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
