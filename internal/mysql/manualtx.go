package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"time"
)

// manualConns holds the connections the keyed creates' transactions run on (idempotency.go):
// connections taken from the pool whose session has autocommit off, so that a transaction opens
// with its first statement and START TRANSACTION's round trip is saved. A group of fresh keys is
// then four round trips (the buckets' lock, the events, the keys, COMMIT) instead of five, and on
// this machine a round trip is 0.4-0.7 ms of a transaction of about 3 ms (docs/performance.md).
// RDS Proxy tracks autocommit, so the SET that turns it off does not pin the session
// (docs/aws-notes.md).
//
// A session with autocommit off must never serve another path: its statements would run in a
// transaction nobody commits, holding their locks. So a connection goes back to the pool only
// after a SET autocommit = 1 the server acknowledged, and every transaction on it ends with
// COMMIT or ROLLBACK before it is kept for the next. Whenever the state of its session is not
// known (a COMMIT or a ROLLBACK that failed, which is also what a statement cut off by its context
// or a lost connection leads to), the connection is discarded: closed, never returned.
//
// A connection kept here is one of the pool's MaxOpenConns that nothing else can use, so it is
// kept only while keyed creates keep coming (handed back after manualIdle unused) and never when
// the pool is full as it is put back (someone may be waiting for a connection).
type manualConns struct {
	db *sql.DB

	mu    sync.Mutex
	idle  []*manualConn // the most recently used last
	timer *time.Timer   // armed while idle holds a connection: hands back the unused ones
}

// manualConn is a connection of manualConns, with no transaction open between two uses.
type manualConn struct {
	conn *sql.Conn
	used time.Time
}

const (
	// maxManualIdle bounds the connections kept: one per keyed group in flight (internal/api's
	// keyedGroupsInFlight: one running its statements, the others their COMMITs).
	maxManualIdle = 4
	// manualIdle is how long a connection is kept unused before it goes back to the pool: long
	// beside the few milliseconds between two groups of a busy process.
	manualIdle = time.Second
	// manualEndTimeout bounds the ROLLBACK and the SET autocommit = 1 that end a connection's use,
	// which run on no caller's context (a caller's that ended may be why they run).
	manualEndTimeout = 5 * time.Second
)

// inManualTx is inTx on a connection of conns: the same retries of deadlocks and lock wait
// timeouts, each attempt a transaction that fn's first statement opens and COMMIT ends, or
// ROLLBACK when fn fails. fn must be safe to run again and touch the database only through tx.
func inManualTx(ctx context.Context, conns *manualConns, stats *Stats, policy RetryPolicy, fn func(tx Conn) error) error {
	return retryTx(ctx, stats, policy, func() error { return conns.run(ctx, fn) })
}

// run is one attempt: fn, then COMMIT, on a connection that is kept afterwards only if its
// transaction ended as the server acknowledged.
func (m *manualConns) run(ctx context.Context, fn func(tx Conn) error) error {
	c, err := m.get(ctx)
	if err != nil {
		return err
	}
	if err := fn(c.conn); err != nil {
		// The server rolls back a deadlock's victim itself, but not a statement that timed out
		// waiting for a lock (innodb_rollback_on_timeout is off): this ends the transaction either
		// way. A connection whose ROLLBACK fails (cut by a context, lost) is discarded: the server
		// rolls back what it held when the connection closes.
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), manualEndTimeout)
		defer cancel()
		if _, rerr := c.conn.ExecContext(ectx, "ROLLBACK"); rerr != nil {
			c.discard()
		} else {
			m.put(c)
		}
		return err
	}
	if _, err := c.conn.ExecContext(ctx, "COMMIT"); err != nil {
		// Whether it committed is unknown (the error is the caller's to interpret), and so is the
		// state of the session.
		c.discard()
		return err
	}
	m.put(c)
	return nil
}

// get returns a kept connection, or a new one with autocommit off.
func (m *manualConns) get(ctx context.Context) (*manualConn, error) {
	m.mu.Lock()
	if n := len(m.idle); n > 0 {
		c := m.idle[n-1]
		m.idle = m.idle[:n-1]
		m.mu.Unlock()
		return c, nil
	}
	m.mu.Unlock()
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	c := &manualConn{conn: conn}
	if _, err := conn.ExecContext(ctx, "SET autocommit = 0"); err != nil {
		// Perhaps applied, its reply lost: never back to the pool.
		c.discard()
		return nil, err
	}
	return c, nil
}

// put keeps c, whose transaction has ended, for the next group, or hands it back to the pool when
// enough are kept or the pool is full.
func (m *manualConns) put(c *manualConn) {
	if st := m.db.Stats(); st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections {
		c.handBack()
		return
	}
	c.used = time.Now()
	m.mu.Lock()
	if len(m.idle) >= maxManualIdle {
		m.mu.Unlock()
		c.handBack()
		return
	}
	m.idle = append(m.idle, c)
	if m.timer == nil {
		m.timer = time.AfterFunc(manualIdle, m.sweep)
	}
	m.mu.Unlock()
}

// sweep hands back the connections unused for manualIdle, and runs again while some are kept.
func (m *manualConns) sweep() {
	m.mu.Lock()
	var stale []*manualConn
	kept := m.idle[:0]
	for _, c := range m.idle {
		if time.Since(c.used) >= manualIdle {
			stale = append(stale, c)
		} else {
			kept = append(kept, c)
		}
	}
	clear(m.idle[len(kept):])
	m.idle = kept
	m.timer = nil
	if len(m.idle) > 0 {
		m.timer = time.AfterFunc(manualIdle, m.sweep)
	}
	m.mu.Unlock()
	for _, c := range stale {
		c.handBack()
	}
}

// handBack turns autocommit on again and returns the connection to the pool; if the server does
// not acknowledge it, the connection is discarded. Its transaction has ended, so the SET commits
// nothing.
func (c *manualConn) handBack() {
	ctx, cancel := context.WithTimeout(context.Background(), manualEndTimeout)
	defer cancel()
	if _, err := c.conn.ExecContext(ctx, "SET autocommit = 1"); err != nil {
		c.discard()
		return
	}
	_ = c.conn.Close() // back to the pool, as any other connection of it
}

// discard closes the connection for good: database/sql drops a connection that reports
// driver.ErrBadConn instead of returning it to the pool (as schema.go does with a pinned one).
func (c *manualConn) discard() {
	_ = c.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.conn.Close()
}
