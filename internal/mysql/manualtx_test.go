package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/stretchr/testify/require"
)

// Invariant: a group of fresh keys is four statements, each a round trip: the buckets' lock, the
// events, the keys, COMMIT. No START TRANSACTION (its connection's session has autocommit off), no
// SET, no ping, and no id allocation (ids come from the block taken ahead). Counted twice: by the
// client, every statement of every connection of the pool, and by the server, on the connection
// the group ran on.
func TestFreshKeyedGroupIsFourStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := testdb.DB(t, 2)
	inner, err := mysql.Connector(mysql.ConnConfig{DSN: dsn})
	require.NoError(t, err)
	counter := &countingConnector{Connector: inner}
	db := mysql.OpenConnector(counter, mysql.ConnConfig{MaxOpenConns: 4})
	t.Cleanup(func() { db.Close() })
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)

	// The first group takes a block of ids and a connection with autocommit off.
	_, err = store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "warm-up", false, "x")})
	require.NoError(t, err)
	before, err := mysql.KeyedQuestions(ctx, store)
	require.NoError(t, err)
	sent := counter.statements.Load()
	res, err := store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{
		keyed("", "a", false, "x"), keyed("", "b", true, "x"), keyed("", "c", false, "x")})
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Created)
	}
	require.EqualValues(t, 4, counter.statements.Load()-sent, "statements the client sent for a group of fresh keys")
	after, err := mysql.KeyedQuestions(ctx, store)
	require.NoError(t, err)
	require.EqualValues(t, 4+1, after-before, "statements the server ran on the group's connection, and the SHOW that counts them")
}

// Invariant: a connection keyed creates ran on goes back to the pool with autocommit on and no
// transaction open, whatever its groups did: committed, failed and rolled back, or cut off while
// waiting for a key another transaction holds (that one is discarded). Other paths on the pool
// commit what they write, and keyed creates go on.
func TestKeyedConnectionsGoBackWithAutocommitOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const conns = 4
	db, _ := testdb.DB(t, conns)
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)

	_, err = store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "committed", false, "x")})
	require.NoError(t, err)
	tooLong := keyed("", "too-long", false, "x")
	tooLong.Answer = func(int64) (int, []byte) { return 201, make([]byte, 5000) } // the body column holds 4,096
	_, err = store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{tooLong})
	require.Error(t, err)
	require.Equal(t, 1, mysql.KeptKeyedConns(store), "a transaction rolled back leaves its connection fit to keep")

	// A key whose bucket another transaction holds: the create waits, is cut off by its wait, and
	// its connection, its statement killed mid-way, is discarded.
	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, "UPDATE idempotency_buckets SET directory = directory WHERE bucket = ?", bucketOf("held"))
	require.NoError(t, err)
	_, err = store.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: time.Hour, Wait: 300 * time.Millisecond},
		[]exactlyonce.KeyedCreate{keyed("", "held", false, "x")})
	require.Equal(t, exactlyonce.ECONFLICT, exactlyonce.ErrorCode(err), "%v", err)
	require.NoError(t, holder.Rollback())
	res, err := store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "held", false, "x")})
	require.NoError(t, err)
	require.True(t, res[0].Created)

	testutil.Eventually(t, 10*time.Second, "the kept connections go back to the pool once unused", func() bool {
		return mysql.KeptKeyedConns(store) == 0
	})
	// Every connection the pool can hand out, at once.
	var held []*sql.Conn
	for range conns {
		c, err := db.Conn(ctx)
		require.NoError(t, err)
		held = append(held, c)
	}
	for _, c := range held {
		var autocommit, inTx int
		require.NoError(t, c.QueryRowContext(ctx, "SELECT @@autocommit, @@in_transaction").Scan(&autocommit, &inTx))
		require.Equal(t, 1, autocommit, "a connection of the pool with autocommit off")
		require.Equal(t, 0, inTx, "a connection of the pool in a transaction")
		require.NoError(t, c.Close())
	}
	n, err := store.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the committed create and the one after the wait")
}

// Invariant: with a pool of one connection, the keyed creates' connection is handed back after
// every group (nothing else could run while it is kept), with autocommit on.
func TestKeyedConnectionOfAFullPoolGoesBackAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := testdb.DB(t, 2)
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)
	for _, k := range []string{"a", "b"} {
		_, err = store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", k, false, "x")})
		require.NoError(t, err)
		require.Zero(t, mysql.KeptKeyedConns(store))
		var autocommit int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT @@autocommit").Scan(&autocommit))
		require.Equal(t, 1, autocommit)
	}
}

// countingConnector counts the statements its connections send, each a round trip
// (interpolateParams: nothing is prepared): a query, an exec, a BEGIN, a COMMIT, a ROLLBACK.
type countingConnector struct {
	driver.Connector
	statements atomic.Int64
}

func (c *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, n: &c.statements}, nil
}

type countingConn struct {
	driver.Conn
	n *atomic.Int64
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.n.Add(1) // START TRANSACTION
	if opts.Isolation != driver.IsolationLevel(sql.LevelDefault) {
		c.n.Add(1) // SET TRANSACTION ISOLATION LEVEL
	}
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{Tx: tx, n: c.n}, nil
}

func (c *countingConn) Ping(ctx context.Context) error {
	c.n.Add(1)
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *countingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type countingTx struct {
	driver.Tx
	n *atomic.Int64
}

func (t countingTx) Commit() error   { t.n.Add(1); return t.Tx.Commit() }
func (t countingTx) Rollback() error { t.n.Add(1); return t.Tx.Rollback() }
