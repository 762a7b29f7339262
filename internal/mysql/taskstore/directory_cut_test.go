package taskstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/stretchr/testify/require"
)

// Invariant: a compaction whose connection is cut between its append to the cells and its delete
// of the log rows it appended (the server kills the connection, as it does a killed process's)
// leaves nothing half done: the cells as they were, the log whole, each reference's directory one
// entry per task; the next compaction moves every entry once. Forced: the test's own transaction
// holds the log's rows, so the compaction appends to the cells and waits at its delete; the test
// sees it wait and kills its connection. A compaction that committed its append before its delete
// (a COMMIT sent between the two) leaves the entries in the cells and in the log: two entries a
// task, and the test fails. (TestACompactionCutOffAnywhereEndsWithEachEntryOnce, whose deadlines
// fall at random, passed with that COMMIT.)
func TestACompactionCutBetweenItsAppendAndItsDeleteLeavesEachEntryOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 6)
	refs := append(taskstore.SameSlot("cut-here", 2), "cut-apart")
	for i := range 12 {
		createOne(ctx, t, store, refs[i%len(refs)], i)
	}
	logged := logRows(ctx, t, db)
	require.Positive(t, logged)
	for _, ref := range refs {
		requireDirectory(ctx, t, db, ref, 0)
	}

	hold, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer hold.Rollback()
	_, err = hold.ExecContext(ctx, "SELECT slot FROM reference_directory_log FOR UPDATE")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
		done <- err
	}()
	var conn int64
	testutil.Eventually(t, 30*time.Second, "the compaction waits at its delete of the log", func() bool {
		if db.QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE 'DELETE FROM reference_directory_log%'").Scan(&conn) != nil {
			return false
		}
		waits, err := mysqltest.WaitsForALock(ctx, db, conn)
		require.NoError(t, err)
		return waits
	})
	_, err = db.ExecContext(ctx, "KILL CONNECTION ?", conn)
	require.NoError(t, err)
	require.NoError(t, hold.Rollback())
	// The compaction fails, or runs again on a new connection and completes: either way the
	// killed transaction committed nothing of its own.
	err = <-done
	t.Logf("the compaction whose connection was killed returned %v", err)
	for _, ref := range refs {
		requireDirectory(ctx, t, db, ref, 0)
	}

	_, err = store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, logRows(ctx, t, db), "the next compaction empties the log")
	for _, ref := range refs {
		requireDirectory(ctx, t, db, ref, 0)
		require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref), ref)
	}
}
