package mysql

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/go-sql-driver/mysql"
)

// MySQL error numbers that mean "this transaction lost a race; run it again".
const (
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK: InnoDB chose this transaction as the victim and rolled it back
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT: innodb_lock_wait_timeout passed while waiting for a row lock
)

// Conn is what a statement is sent through: a *sql.Tx of the pool (InTx), a connection whose
// session has autocommit off, inside the transaction its first statement opened (InManualTx,
// manualtx.go), or the pool itself (*sql.DB), for a read outside any transaction.
type Conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Stats counts what the retry helper saw. Safe for concurrent use.
type Stats struct {
	Deadlocks        atomic.Int64 // 1213s seen (each was retried unless attempts ran out)
	LockWaitTimeouts atomic.Int64 // 1205s seen
	Retries          atomic.Int64 // transactions run again
	GaveUp           atomic.Int64 // transactions that failed with a retryable error after the last attempt
}

// StatsSnapshot is a copy of Stats at one moment.
type StatsSnapshot struct {
	Deadlocks, LockWaitTimeouts, Retries, GaveUp int64
}

func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{s.Deadlocks.Load(), s.LockWaitTimeouts.Load(), s.Retries.Load(), s.GaveUp.Load()}
}

// RetryPolicy bounds how often and how patiently a transaction is run again.
type RetryPolicy struct {
	MaxAttempts int           // including the first; default 8
	BaseDelay   time.Duration // first backoff; default 2ms, doubled each retry
	MaxDelay    time.Duration // cap on one backoff; default 250ms
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 8
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 2 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 250 * time.Millisecond
	}
	return p
}

// retryable tells whether err is a deadlock or a lock wait timeout, counts it, and returns the
// metric of its retry.
func (s *Stats) retryable(err error) (metrics.Metric, bool) {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return 0, false
	}
	switch me.Number {
	case errDeadlock:
		s.Deadlocks.Add(1)
		return metrics.DeadlockRetries, true
	case errLockWaitTimeout:
		s.LockWaitTimeouts.Add(1)
		return metrics.LockWaitRetries, true
	}
	return 0, false
}

// inTx is the transaction shape of every path but the keyed creates (which run the same retries on
// connections with autocommit off, manualtx.go): begin at READ COMMITTED, run fn, commit; roll
// back on any error; run it all again, after a jittered exponential backoff, when it lost a
// deadlock or a lock wait, up to the policy's bound. fn must be safe to run again: it may only touch the database through tx.
//
// Every transaction runs at READ COMMITTED, whatever the server's default: at REPEATABLE READ the
// full scans of this index-less schema lock every row they pass and workers block each other
// (see docs/innodb.md). The level is the session's, set once per connection by the connector
// (db.go: readCommitted), so BEGIN is one round trip, START TRANSACTION, not two.
//
// The Recorder ctx carries (metrics.From) hears of each retry (DeadlockRetries, LockWaitRetries)
// and of the duration of the attempt that committed (TransactionDuration): in memory, after the
// transaction, never a round trip of its own.
func inTx(ctx context.Context, db *sql.DB, stats *Stats, policy RetryPolicy, fn func(*sql.Tx) error) error {
	return retryTx(ctx, stats, policy, func() error { return runTx(ctx, db, fn) })
}

// retryTx runs attempt, one whole transaction, and runs it again as inTx says.
func retryTx(ctx context.Context, stats *Stats, policy RetryPolicy, attempt func() error) error {
	policy = policy.withDefaults()
	delay := policy.BaseDelay
	rec := metrics.From(ctx)
	for n := 1; ; n++ {
		var start time.Time
		if rec != nil {
			start = time.Now()
		}
		err := attempt()
		if err == nil {
			if rec != nil {
				rec.ObserveDuration(metrics.TransactionDuration, time.Since(start))
				rec.Add(metrics.Transactions, 1)
			}
			return nil
		}
		metric, retry := stats.retryable(err)
		if !retry {
			return err
		}
		if n >= policy.MaxAttempts {
			stats.GaveUp.Add(1)
			return err
		}
		stats.Retries.Add(1)
		rec.Add(metric, 1)
		// Full jitter: sleep a random time up to the current bound, so the losers of a deadlock do
		// not collide again in lockstep.
		sleep := time.Duration(rand.Int64N(int64(delay)) + 1)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(sleep):
		}
		delay = min(2*delay, policy.MaxDelay)
	}
}

func runTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil) // READ COMMITTED: the session's level (db.go)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
