package mysqltest_test

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	_ "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// WaitsForALock sees a transaction that waits for a row lock, and only that one, while other
// sessions read information_schema.INNODB_TRX as fast as they can (as tests running side by side
// do), which keeps that table's cache from showing the wait.
func TestWaitsForALockSeesAWaitWhileOthersReadInnodbTrx(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := sql.Open("mysql", testdb.NewDatabase(t))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE TABLE lockwait (a INT)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO lockwait VALUES (1), (2)")
	require.NoError(t, err)

	var readers sync.WaitGroup
	var reads atomic.Int64
	for range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for ctx.Err() == nil {
				var n int
				if db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX").Scan(&n) == nil {
					reads.Add(1)
				}
			}
		}()
	}
	defer readers.Wait()
	defer cancel()
	// The readers' first reads fill the cache before the transactions begin.
	testutil.Eventually(t, 10*time.Second, "the readers read INNODB_TRX", func() bool { return reads.Load() >= 3 })

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close() // after the holder's rollback, which ends the waiter's wait
	var waiterID int64
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&waiterID))
	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer holder.Rollback()
	_, err = holder.ExecContext(ctx, "UPDATE lockwait SET a = a + 10 WHERE a = 1")
	require.NoError(t, err)
	var holderID int64
	require.NoError(t, holder.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&holderID))

	done := make(chan error, 1)
	go func() {
		_, err := conn.ExecContext(ctx, "UPDATE lockwait SET a = a + 10 WHERE a = 1")
		done <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the waiter is seen waiting for the holder's lock", func() bool {
		waits, err := mysqltest.WaitsForALock(ctx, db, waiterID)
		require.NoError(t, err)
		return waits
	})
	waits, err := mysqltest.WaitsForALock(ctx, db, holderID)
	require.NoError(t, err)
	require.False(t, waits, "the holder does not wait")
	require.NoError(t, holder.Rollback())
	require.NoError(t, <-done)
	waits, err = mysqltest.WaitsForALock(ctx, db, waiterID)
	require.NoError(t, err)
	require.False(t, waits, "the waiter no longer waits")
}
