package keystore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestMain runs the tests, or, started again by a test in the child role "pruner", a process that
// prunes expired idempotency keys once, as the sweeper's maintenance does, in batches of 5.
func TestMain(m *testing.M) {
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

func runChild(role string) int {
	if role != "pruner" {
		fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
		return 2
	}
	store, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n, err := store.Keys.PruneKeys(context.Background(), 5, 1000)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("done: pruned %d\n", n)
	return 0
}

// Invariant: the pruning of expired idempotency keys (the sweeper's maintenance: autocommit
// DELETEs of at most a batch each) SIGKILLed inside one of its statements, before it commits,
// loses no live key and jams nothing: every live key still replays its stored answer, the
// batches before the killed one stay pruned, and the next prune, from another process, deletes
// every expired key that is left. Forced: the test's own transaction holds an expired key's row,
// so a real pruner process deletes batches until its DELETE waits for that row; the test sees it
// wait and SIGKILLs it, and holds the row until the server has given up the killed connection
// (its lock wait times out after 1 s). Each batch is one autocommit statement, so the killed one
// is rolled back whole (or, had it finished, committed whole): there is no step between
// statements that a kill could break. A prune that matched live keys (seen with its NOW(6) made
// NOW(6) + INTERVAL 2 HOUR) deletes some in the batches before the kill: the test fails.
func TestKillingAKeyPrunerLosesNoLiveKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, dsn := testdb.DB(t, 8)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	const expired, live = 30, 10
	var old, fresh []exactlyonce.KeyedCreate
	for i := range expired {
		old = append(old, keyed("", fmt.Sprint("old-", i), false, "x"))
	}
	for i := range live {
		fresh = append(fresh, keyed("", fmt.Sprint("live-", i), true, "x"))
	}
	_, err = store.Keys.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: 300 * time.Millisecond, Wait: 30 * time.Second}, old)
	require.NoError(t, err)
	stored, err := store.Keys.CreateKeyed(ctx, keyOpts, fresh)
	require.NoError(t, err)
	count := func(cond string) (n int) {
		t.Helper()
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency_keys WHERE "+cond).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return count("expires_at <= NOW(6)") == expired }, 60*time.Second, 20*time.Millisecond)

	// The test holds one expired key's row (one a batch matches, so the pruner waits for it).
	hold, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer hold.Rollback()
	held := exactlyonce.KeyHash("", "old-17")
	var got []byte
	require.NoError(t, hold.QueryRowContext(ctx, "SELECT key_hash FROM idempotency_keys WHERE key_hash = ? FOR UPDATE", held[:]).Scan(&got))

	sep := map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")]
	pruner := child.Start(t, "pruner", "DB_DSN="+dsn+sep+"innodb_lock_wait_timeout=1")
	var conn int64
	require.Eventually(t, func() bool {
		err := db.QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE 'DELETE FROM idempotency_keys%'").Scan(&conn)
		if err != nil {
			return false
		}
		waits, err := mysqltest.WaitsForALock(ctx, db, conn)
		require.NoError(t, err)
		return waits
	}, 60*time.Second, 10*time.Millisecond, "the pruner waits for the held key; its output: %q", pruner.Output())
	pruner.Kill()
	require.Eventually(t, func() bool {
		gone, err := mysqltest.ConnectionGone(ctx, db, conn)
		require.NoError(t, err)
		return gone
	}, 60*time.Second, 10*time.Millisecond, "the killed pruner's connection is closed")
	require.NoError(t, hold.Rollback())

	left := count("expires_at <= NOW(6)")
	require.Positive(t, left, "the held key, at least, is left")
	require.Equal(t, live, count("expires_at > NOW(6)"), "no live key pruned")
	again, err := store.Keys.CreateKeyed(ctx, keyOpts, fresh)
	require.NoError(t, err)
	for i, r := range again {
		require.False(t, r.Created, "live-%d replays", i)
		require.Equal(t, stored[i].Record, r.Record)
	}

	pruned, err := store.Keys.PruneKeys(ctx, 5, 1000)
	require.NoError(t, err)
	require.Equal(t, left, pruned, "the next prune deletes what is left")
	require.Zero(t, count("expires_at <= NOW(6)"))
	require.Equal(t, live, count("1"))
	// An expired key is fresh again; a live one still replays.
	res, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{old[17], fresh[0]})
	require.NoError(t, err)
	require.True(t, res[0].Created)
	require.False(t, res[1].Created)
}
