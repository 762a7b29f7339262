package mysqltest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// StatementTally counts the statements its connections send, each a round trip
// (interpolateParams: nothing is prepared): a query, an exec, a ping, a transaction's begin (one
// statement, START TRANSACTION, or two when it names an isolation level) and its end. For
// measurements (the agents bench's idle statements) and the tests that count a path's round trips.
// With RowsOf set, it also counts the rows returned by the queries whose text holds RowsOf (Rows):
// for the tests that bound what a statement reads back.
//
// With Of set, it also counts the statements whose text holds Of (Matching): for the tests that
// check a statement is no longer sent on a path.
type StatementTally struct {
	driver.Connector
	RowsOf     string
	Of         string
	statements atomic.Int64
	rows       atomic.Int64
	matching   atomic.Int64
}

func (c *StatementTally) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &tallyConn{Conn: conn, n: &c.statements, rowsOf: c.RowsOf, rows: &c.rows, of: c.Of, matching: &c.matching}, nil
}

type tallyConn struct {
	driver.Conn
	n        *atomic.Int64
	rowsOf   string
	rows     *atomic.Int64
	of       string
	matching *atomic.Int64
}

// count counts statement q.
func (c *tallyConn) count(q string) {
	c.n.Add(1)
	if c.of != "" && strings.Contains(q, c.of) {
		c.matching.Add(1)
	}
}

func (c *tallyConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.count(q)
	rows, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	if err != nil || c.rowsOf == "" || !strings.Contains(q, c.rowsOf) {
		return rows, err
	}
	return tallyRows{Rows: rows, n: c.rows}, nil
}

// tallyRows counts the rows read from a query's result.
type tallyRows struct {
	driver.Rows
	n *atomic.Int64
}

func (r tallyRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err == nil {
		r.n.Add(1)
	}
	return err
}

func (c *tallyConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.count(q)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *tallyConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.n.Add(1) // START TRANSACTION
	if opts.Isolation != driver.IsolationLevel(sql.LevelDefault) {
		c.n.Add(1) // SET TRANSACTION ISOLATION LEVEL
	}
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return tallyTx{Tx: tx, n: c.n}, nil
}

func (c *tallyConn) Ping(ctx context.Context) error {
	c.n.Add(1)
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *tallyConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *tallyConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *tallyConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type tallyTx struct {
	driver.Tx
	n *atomic.Int64
}

func (t tallyTx) Commit() error   { t.n.Add(1); return t.Tx.Commit() }
func (t tallyTx) Rollback() error { t.n.Add(1); return t.Tx.Rollback() }

// Statements returns how many statements the connections have sent so far.
func (c *StatementTally) Statements() int64 { return c.statements.Load() }

// Matching returns how many statements whose text holds Of the connections have sent so far.
func (c *StatementTally) Matching() int64 { return c.matching.Load() }

// Rows returns how many rows the queries whose text holds RowsOf have returned so far.
func (c *StatementTally) Rows() int64 { return c.rows.Load() }

// TalliedDB opens a pool of at most conns connections to dsn whose statements the returned tally
// counts (and, with rowsOf set, the rows of the queries whose text holds it: StatementTally.RowsOf),
// closed when t ends: for the tests that count a path's round trips.
func TalliedDB(t testing.TB, dsn string, conns int, rowsOf string) (*sql.DB, *StatementTally) {
	t.Helper()
	inner, err := mysql.Connector(mysql.ConnConfig{DSN: dsn})
	if err != nil {
		t.Fatalf("connector for %s: %v", dsn, err)
	}
	tally := &StatementTally{Connector: inner, RowsOf: rowsOf}
	db := mysql.OpenConnector(tally, mysql.ConnConfig{MaxOpenConns: conns})
	t.Cleanup(func() { db.Close() })
	return db, tally
}
