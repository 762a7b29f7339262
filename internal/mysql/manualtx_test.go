package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
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
	db, tally := mysqltest.TalliedDB(t, dsn, 4, "")
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)

	// The first group takes a block of ids and a connection with autocommit off.
	_, err = store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "warm-up", false, "x")})
	require.NoError(t, err)
	before, err := mysql.ManualQuestions(ctx, store.DB)
	require.NoError(t, err)
	sent := tally.Statements()
	res, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{
		keyed("", "a", false, "x"), keyed("", "b", true, "x"), keyed("", "c", false, "x")})
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Created)
	}
	require.EqualValues(t, 4, tally.Statements()-sent, "statements the client sent for a group of fresh keys")
	after, err := mysql.ManualQuestions(ctx, store.DB)
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
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)

	_, err = store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "committed", false, "x")})
	require.NoError(t, err)
	tooLong := keyed("", "too-long", false, "x")
	tooLong.Answer = func(int64) (int, []byte) { return 201, make([]byte, 5000) } // the body column holds 4,096
	_, err = store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{tooLong})
	require.Error(t, err)
	require.Equal(t, 1, mysql.KeptManualConns(store.DB), "a transaction rolled back leaves its connection fit to keep")

	// A key whose bucket another transaction holds: the create waits, is cut off by its wait, and
	// its connection, its statement killed mid-way, is discarded.
	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, "UPDATE idempotency_buckets SET directory = directory WHERE bucket = ?", bucketOf("held"))
	require.NoError(t, err)
	_, err = store.Keys.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: time.Hour, Wait: 300 * time.Millisecond},
		[]exactlyonce.KeyedCreate{keyed("", "held", false, "x")})
	require.Equal(t, exactlyonce.ECONFLICT, exactlyonce.ErrorCode(err), "%v", err)
	require.NoError(t, holder.Rollback())
	res, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "held", false, "x")})
	require.NoError(t, err)
	require.True(t, res[0].Created)

	testutil.Eventually(t, 10*time.Second, "the kept connections go back to the pool once unused", func() bool {
		return mysql.KeptManualConns(store.DB) == 0
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
	n, err := store.Events.Count(ctx)
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
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	for _, k := range []string{"a", "b"} {
		_, err = store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", k, false, "x")})
		require.NoError(t, err)
		require.Zero(t, mysql.KeptManualConns(store.DB))
		var autocommit int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT @@autocommit").Scan(&autocommit))
		require.Equal(t, 1, autocommit)
	}
}
