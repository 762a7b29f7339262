package taskstore_test

import (
	"context"
	"os"
	"testing"
	"time"

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
