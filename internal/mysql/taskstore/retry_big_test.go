package taskstore_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/stretchr/testify/require"
)

// A reference with far more failed tasks than a part holds (8,000: a receiver down for long, with
// maxRetries 0), retried with the default part (500) and a budget of 300 ms a call: each call answers
// once its budget is spent, with more, and the calls together retry every task once, in place, in
// order. (60,000 took 3 calls of at most 5.1 s with the API's 5 s budget, 13.7 s in all: see
// docs/tasks.md; before parts, the one transaction passed the API's 10 s timeout and was rolled
// back every time.) The calls' times are logged, not asserted.
func TestARetryOfManyFailedTasksGoesInCallsOfABoundedTime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 8)
	ids, err := mysqltest.FailedReferenceTasks(ctx, db, store.Tasks, "https://example.com/hook", "big", 8000)
	require.NoError(t, err)
	store.Tasks.RetryParts(0, 300*time.Millisecond)
	var all []int64
	calls := 0
	for {
		calls++
		start := time.Now()
		got, err := store.Tasks.RetryReference(ctx, "big")
		require.NoError(t, err)
		t.Logf("call %d: %d retried in %v, more %v", calls, len(got.IDs), time.Since(start), got.More)
		all = append(all, got.IDs...)
		if !got.More {
			require.Equal(t, ids[0], got.Head)
			break
		}
	}
	require.Greater(t, calls, 1, "the budget ends a call before the last part")
	require.Equal(t, ids, all, "every failed task once, in order")
	var pendingN, queuedN, firstPending int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT SUM(state = 0), SUM(state = 2), MAX(IF(state = 0, id, 0)) FROM events
		WHERE kind = 'task' AND reference_id = 'big'`).Scan(&pendingN, &queuedN, &firstPending))
	require.Equal(t, []int64{1, 7999, ids[0]}, []int64{pendingN, queuedN, firstPending})
}

// 60,000 failed tasks (a size whose one transaction passed the API's 10 s: see docs/tasks.md) of
// a database whose directory is not complete, retried with the API's defaults (parts of 500, 5 s
// a call): before, this case went whole, one transaction of 60,000 tasks; now every part holds at
// most 500 and the calls, each ending with more until the last, retry every task once, in order.
// Each call reads the failed set once (it read it for every part). The calls' times are logged,
// not asserted. About 50 s on a loaded 2-core machine, and far longer under -race (past `make
// test`'s budget): it runs with RETRY_BIG set (`RETRY_BIG=1 go test -run SixtyThousand
// ./internal/mysql/taskstore/`); TestARetryInPartsWhileTheDirectoryIsIncomplete covers the case
// in every run.
func TestARetryOfSixtyThousandFailedTasksWhileTheDirectoryIsIncompleteGoesInParts(t *testing.T) {
	if os.Getenv("RETRY_BIG") == "" {
		t.Skip("60,000 tasks: set RETRY_BIG to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 8)
	ids, err := mysqltest.FailedReferenceTasks(ctx, db, store.Tasks, "https://example.com/hook", "huge", 60000)
	require.NoError(t, err)
	store = forgottenDirectory(ctx, t, db)
	reads := taskstore.CountFailedSetReads(store.Tasks)
	parts := 0
	taskstore.RetryInParts(store.Tasks, 0, 0, func(int) error { parts++; return nil })
	var all []int64
	calls := 0
	start := time.Now()
	for {
		calls++
		began, before := time.Now(), len(all)
		got, err := store.Tasks.RetryReference(ctx, "huge")
		require.NoError(t, err)
		all = append(all, got.IDs...)
		t.Logf("call %d: %d retried in %v, more %v", calls, len(all)-before, time.Since(began), got.More)
		if !got.More {
			require.Equal(t, ids[0], got.Head)
			break
		}
	}
	t.Logf("%d calls, %d parts, %d reads of the failed set, %v in all", calls, parts, reads(), time.Since(start))
	require.GreaterOrEqual(t, parts, 120, "parts of at most 500")
	require.Equal(t, ids, all, "every failed task once, in order")
	require.Equal(t, int64(calls), reads(), "one read of the failed set a call")
	var pendingN, queuedN int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT SUM(state = 0), SUM(state = 2) FROM events
		WHERE kind = 'task' AND reference_id = 'huge'`).Scan(&pendingN, &queuedN))
	require.Equal(t, []int64{1, 59999}, []int64{pendingN, queuedN})
}

// 20,000 failed tasks behind a task that is open now (claimed: processing), retried with the API's
// defaults (parts of 500, 5 s a call): before, this case went whole, one transaction of every
// failed task (some 50,000 passed the API's 10 s and were rolled back every time); now every part
// holds at most 500, the first holds its frontier, and the calls, each ending with more until the
// last, retry every task once, to the end, in order, behind the open task. Each call's time is
// logged and checked against the API's 10 s. Minutes under -race: it runs with RETRY_BIG set
// (`RETRY_BIG=1 go test -run TwentyThousand ./internal/mysql/taskstore/`);
// TestARetryToTheEndBehindAnOpenTaskGoesInParts covers the case in every run.
func TestARetryOfTwentyThousandFailedTasksBehindAnOpenTaskGoesInBoundedCalls(t *testing.T) {
	if os.Getenv("RETRY_BIG") == "" {
		t.Skip("20,000 tasks: set RETRY_BIG to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ref = "huge-open"
	db, store := dbWithStores(t, 8)
	ids, err := mysqltest.FailedReferenceTasks(ctx, db, store.Tasks, "https://example.com/hook", ref, 20000)
	require.NoError(t, err)
	_, open := claimTask(ctx, t, store, createOne(ctx, t, store, ref, 0))
	parts := 0
	taskstore.RetryInParts(store.Tasks, 0, 0, func(int) error { parts++; return nil })
	var all []int64
	calls := 0
	start := time.Now()
	for {
		calls++
		began, before := time.Now(), len(all)
		got, err := store.Tasks.RetryReference(ctx, ref)
		require.NoError(t, err)
		took := time.Since(began)
		all = append(all, got.IDs...)
		t.Logf("call %d: %d retried in %v, more %v", calls, len(all)-before, took, got.More)
		require.Less(t, took, 10*time.Second, "within the API's timeout")
		require.Equal(t, exactlyonce.RetryAtEnd, got.Placement)
		if !got.More {
			require.Zero(t, got.Head, "the frontier is released queued: the open task heads the reference")
			break
		}
	}
	t.Logf("%d calls, %d parts, %v in all", calls, parts, time.Since(start))
	require.GreaterOrEqual(t, parts, 40, "parts of at most 500")
	require.Equal(t, ids, all, "every failed task once, in order")
	var processingN, queuedN, last int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT SUM(state = 1), SUM(state = 2), SUM(id = ? AND state = 1) FROM events
		WHERE kind = 'task' AND reference_id = ?`, open.ID, ref).Scan(&processingN, &queuedN, &last))
	require.Equal(t, []int64{1, 20000, 1}, []int64{processingN, queuedN, last}, "the open task, the retried ones queued behind it")
	require.Equal(t, ids, queuedInOrder(ctx, t, db, ref), "in their order")
}

// queuedInOrder is the ids of ref's queued tasks, in position order.
func queuedInOrder(ctx context.Context, t *testing.T, db *sql.DB, ref string) []int64 {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT id FROM events WHERE kind = 'task' AND reference_id = ? AND state = 2 ORDER BY position", ref)
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}
