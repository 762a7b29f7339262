package eventstore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestMain runs the tests, or, started again by a test in the child role "folder", a process that
// folds settled events into the count once, as the sweeper does.
func TestMain(m *testing.M) {
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

func runChild(role string) int {
	if role != "folder" {
		fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
		return 2
	}
	store, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n, err := store.Events.FoldSettled(context.Background(), 1000)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("done: folded %d\n", n)
	return 0
}

// Invariant: a fold killed between its move and its commit (its events moved out of `fresh`, its
// addition to settled_count not committed) moves and counts nothing: GET /events stays exact, the
// events are in `fresh` still, and the next fold moves and counts each once. Forced: the test's
// own transaction holds settled_count's row, so a real folder process moves its events and waits
// at its addition; the test sees it wait for the lock and SIGKILLs it, and holds the row until
// the server has given up the killed connection (its addition's lock wait times out after 1 s,
// as the chaos run's sessions' do, and its error finds no client): the server rolls the fold
// back. A fold that committed its move before its addition (a COMMIT sent between the two) loses
// the moved events from the count: 0 of 300, and the test fails.
func TestAFoldKilledBeforeItsCommitMovesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := testdb.DB(t, 4)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	const events = 300
	_, err = mysqltest.LoadProcessed(ctx, db, events, nil)
	require.NoError(t, err)
	unfolded := func() (fresh, counted int64) {
		t.Helper()
		require.NoError(t, db.QueryRow("SELECT (SELECT COUNT(*) FROM events WHERE state >= 10 AND state < 30), (SELECT n FROM settled_count)").Scan(&fresh, &counted))
		return fresh, counted
	}
	fresh, counted := unfolded()
	require.EqualValues(t, events, fresh)
	require.Zero(t, counted)

	hold, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer hold.Rollback()
	_, err = hold.ExecContext(ctx, "SELECT n FROM settled_count FOR UPDATE")
	require.NoError(t, err)

	// Every session of the folder waits 1 s at most for a row lock.
	sep := map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")]
	folder := child.Start(t, "folder", "DB_DSN="+dsn+sep+"innodb_lock_wait_timeout=1")
	// The folder's connection, once it runs its addition: it has moved its events and waits for
	// the row the test holds.
	var conn int64
	require.Eventually(t, func() bool {
		err := db.QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE 'UPDATE settled_count%'").Scan(&conn)
		if err != nil {
			return false
		}
		waits, err := mysqltest.WaitsForALock(ctx, db, conn)
		require.NoError(t, err)
		return waits
	}, 60*time.Second, 10*time.Millisecond, "the folder waits at its addition; its output: %q", folder.Output())
	folder.Kill()
	// The server notices the client is gone when the addition's wait times out and its error
	// cannot be sent; it then rolls the fold's transaction back.
	require.Eventually(t, func() bool {
		gone, err := mysqltest.ConnectionGone(context.Background(), db, conn)
		require.NoError(t, err)
		return gone
	}, 60*time.Second, 10*time.Millisecond, "the killed folder's connection is closed")
	require.NoError(t, hold.Rollback())

	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, events, n, "the count after the killed fold")
	fresh, counted = unfolded()
	require.EqualValues(t, events, fresh, "the killed fold's move was rolled back")
	require.Zero(t, counted)

	moved, err := store.Events.FoldSettled(ctx, 1000)
	require.NoError(t, err)
	require.EqualValues(t, events, moved, "the next fold moves every event once")
	n, err = store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, events, n)
	fresh, counted = unfolded()
	require.Zero(t, fresh)
	require.EqualValues(t, events, counted)
}
