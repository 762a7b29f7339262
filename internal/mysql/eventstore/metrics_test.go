package eventstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// backdate moves an event's creation into the past, behind the store's back, so that ages are
// known without waiting for them.
func backdate(t *testing.T, store *wire.Stores, id int64, by time.Duration) {
	t.Helper()
	_, err := store.DB.Pool().Exec("UPDATE events SET created_at = NOW(6) - INTERVAL ? MICROSECOND WHERE id = ?", by.Microseconds(), id)
	require.NoError(t, err)
}

// requireAge checks the oldest waiting age: at least want (the backdating), and not much more
// (the time the test itself takes).
func requireAge(t *testing.T, store *wire.Stores, want time.Duration, why string) {
	t.Helper()
	got, err := store.Events.OldestWaitingAge(context.Background())
	require.NoError(t, err)
	require.GreaterOrEqual(t, got, want, why)
	require.Less(t, got, want+30*time.Second, why)
}

// requireWaiting checks the count of waiting events.
func requireWaiting(t *testing.T, store *wire.Stores, want int64, why string) {
	t.Helper()
	n, err := store.Events.WaitingEvents(context.Background())
	require.NoError(t, err)
	require.Equal(t, want, n, why)
}

// The age of the oldest event waiting to be claimed: pending, or leased with an expired lease.
// Settled events and live leases, however old, are not waiting.
func TestOldestWaitingAge(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()

	age, err := store.Events.OldestWaitingAge(ctx)
	require.NoError(t, err)
	require.Zero(t, age, "nothing waits in an empty table")
	requireWaiting(t, store, 0, "nothing waits in an empty table")

	// A settled event, older than anything else: not waiting.
	done, err := store.Events.CreateProcessed(ctx, "v")
	require.NoError(t, err)
	backdate(t, store, done.ID, 100*time.Hour)
	age, err = store.Events.OldestWaitingAge(ctx)
	require.NoError(t, err)
	require.Zero(t, age, "a processed event is not waiting")
	requireWaiting(t, store, 0, "a processed event is not waiting")

	fresh, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	old, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	backdate(t, store, old, 5*time.Minute)
	requireAge(t, store, 5*time.Minute, "the oldest pending event")
	requireWaiting(t, store, 2, "two pending events")

	// Leased under a live lease, older still: a worker has it, it is not waiting.
	live, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	got, err := store.Events.ClaimIDs(ctx, claimFor(exactlyonce.ByProcessor, time.Hour), []int64{live}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, got.Leased, 1)
	backdate(t, store, live, 50*time.Hour)
	requireAge(t, store, 5*time.Minute, "a live lease is not waiting")
	requireWaiting(t, store, 2, "a live lease is not waiting")

	// The same lease, expired: its worker is gone, the event waits again.
	_, err = store.DB.Pool().Exec("UPDATE events SET lease_expires_at = NOW(6) - INTERVAL 1 SECOND WHERE id = ?", live)
	require.NoError(t, err)
	requireAge(t, store, 50*time.Hour, "an expired lease is waiting")
	requireWaiting(t, store, 3, "an expired lease is waiting")

	// Settle the expired lease and the old pending event: the fresh one is what is left.
	processed, err := processIDs(ctx, store, false, live, old)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeSettled, processed[live])
	require.Equal(t, exactlyonce.OutcomeSettled, processed[old])
	age, err = store.Events.OldestWaitingAge(ctx)
	require.NoError(t, err)
	require.Less(t, age, time.Minute, "only the fresh event (%d) waits", fresh)
	requireWaiting(t, store, 1, "only the fresh event waits")

	_, err = processIDs(ctx, store, false, fresh)
	require.NoError(t, err)
	age, err = store.Events.OldestWaitingAge(ctx)
	require.NoError(t, err)
	require.Zero(t, age, "nothing waits once everything is settled")
	requireWaiting(t, store, 0, "nothing waits once everything is settled")
}

// The reads are pruned to the `open` partition, so its cost is bounded by the open events and not by
// the processed history. (EXPLAIN PARTITIONS on MariaDB; MySQL 8 removed that syntax and lists the
// partitions in plain EXPLAIN.)
func TestOldestWaitingAgeReadsOnlyTheOpenPartition(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	for _, q := range []string{"OldestWaitingAge", "WaitingEvents"} {
		parts := explainPartitions(t, store.DB.Pool(), eventstore.QueryText(q))
		require.NotEmpty(t, parts)
		for _, p := range parts {
			require.True(t, strings.HasPrefix(p, "open"), "%s touches partition %s (all: %v)", q, p, parts)
		}
	}

	// The check can fail: a read of every partition lists the settled ones too.
	all := explainPartitions(t, store.DB.Pool(), "SELECT COUNT(*) FROM events")
	require.Contains(t, strings.Join(all, ","), "settled")
}

// explainPartitions returns the partitions (or subpartitions) EXPLAIN says q reads.
func explainPartitions(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	parts, err := mysqltest.ExplainPartitions(context.Background(), db, q)
	require.NoError(t, err, "EXPLAIN has a partitions column")
	return parts
}

// The Recorder a transaction's context carries hears of each retry, by cause, and of the duration of
// the attempt that committed; a transaction that fails for another reason records no duration.
func TestTransactionMetrics(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	rec := metrics.NewRecorder(metrics.PartProcessor, true, nil)
	ctx := metrics.With(context.Background(), rec)
	attempt := 0
	err := store.Events.InTx(ctx, func(ctx context.Context, tx *eventstore.Tx) error {
		attempt++
		switch attempt {
		case 1, 2:
			return &drv.MySQLError{Number: 1213, Message: "Deadlock found"}
		case 3:
			return &drv.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 4, attempt)
	require.Error(t, store.Events.InTx(ctx, func(context.Context, *eventstore.Tx) error { return errors.New("not a race") }))

	values := map[string]metrics.Value{}
	for _, v := range rec.Values() {
		values[v.Name] = v
	}
	require.Equal(t, 2.0, values["DeadlockRetries"].Value)
	require.Equal(t, 1.0, values["LockWaitRetries"].Value)
	require.Len(t, values["TransactionDuration"].Values, 1, "the one attempt that committed")
	require.Equal(t, 1.0, values["Transactions"].Value, "one committed transaction; the failed one is not counted")
}
