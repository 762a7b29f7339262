package taskstore_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Bulk retries in parts racing each other and the reference's other writers, with real clients
// against the database: whatever the interleaving, every task once, one open task, the failed
// tasks in their order, and every caller's calls end (More false) without an error.

// retryUntilDone calls RetryReference(ref) until it answers More false and returns every id it
// answered, in order.
func retryUntilDone(ctx context.Context, store *wire.Stores, ref string) ([]int64, error) {
	var all []int64
	for {
		got, err := store.Tasks.RetryReference(ctx, ref)
		if err != nil {
			return all, err
		}
		all = append(all, got.IDs...)
		if !got.More {
			return all, nil
		}
	}
}

// Two callers retry one reference at once, both in parts (of 1, so that they race at every part):
// each part's tasks are retried by one of them, neither fails, and the tasks end in their places.
func TestTwoRetriesInPartsOfOneReferenceAtOnceBothFinish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ref = "parts-two"
	const n = 80
	db, store, ids := failedReference(ctx, t, ref, n)
	taskstore.RetryInParts(store.Tasks, 1, time.Minute, nil)
	var wg sync.WaitGroup
	got := make([][]int64, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = retryUntilDone(ctx, store, ref)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	seen := map[int64]int{}
	for _, g := range got {
		for _, id := range g {
			seen[id]++
		}
	}
	require.Len(t, seen, n, "every failed task retried")
	for id, c := range seen {
		require.Equal(t, 1, c, "task %d retried once", id)
	}
	want := [][2]int64{{ids[0], pending}}
	for _, id := range ids[1:] {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref))
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
	require.True(t, claimable(ctx, t, store, ids[0]), "released")
}

// Two bulk retries in parts of one reference race a processor that delivers its tasks (every
// third attempt fails for good, making new failed tasks), creates of the reference and retries of
// its failed tasks one by one. No call fails; afterwards (a last retry and the queue drained) every
// task was delivered once, one task open at a time, and the deliveries went in position order:
// a task delivered after another stands after it.
func TestRetriesInPartsRacingDeliveriesCreatesAndTaskRetriesKeepOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ref = "parts-race"
	db, store, _ := failedReference(ctx, t, ref, 40)
	taskstore.RetryInParts(store.Tasks, 3, time.Minute, nil)

	var mu sync.Mutex
	var delivered [][2]int64 // id, position at its claim
	attempts := 0
	deliver := func() (bool, error) {
		var id int64
		err := db.QueryRowContext(ctx, "SELECT id FROM events WHERE kind = 'task' AND reference_id = ? AND state = 0 AND (next_attempt_at IS NULL OR next_attempt_at <= NOW(6))", ref).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
		claimed, err := store.Events.ClaimIDs(ctx, c, []int64{id}, mysqltest.LeaseAll)
		if err != nil || len(claimed.Leased) == 0 {
			return false, err
		}
		e := claimed.Leased[0]
		mu.Lock()
		attempts++
		ok := attempts%3 != 0
		mu.Unlock()
		_, err = store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: e, Delivered: ok, Final: !ok,
			Attempt: exactlyonce.Attempt{Number: e.Attempts + 1, Started: time.Now(), Status: 200}}}, false)
		if err == nil && ok {
			mu.Lock()
			delivered = append(delivered, [2]int64{e.ID, e.Task.Position})
			mu.Unlock()
		}
		return true, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	stop := make(chan struct{})
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	for range 2 {
		run(func() error {
			for range 5 {
				if _, err := retryUntilDone(ctx, store, ref); err != nil {
					return err
				}
			}
			return nil
		})
	}
	run(func() error { // the processor
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			if _, err := deliver(); err != nil {
				return err
			}
		}
	})
	run(func() error { // creates
		for i := range 20 {
			if _, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(ref, 100+i)}); err != nil {
				return err
			}
		}
		return nil
	})
	run(func() error { // a task's retry of the reference's last failed task
		for range 20 {
			var id int64
			err := db.QueryRowContext(ctx, "SELECT MAX(id) FROM events WHERE kind = 'task' AND reference_id = ? AND state IN (20, 40)", ref).Scan(&id)
			if err != nil || id == 0 {
				continue
			}
			if _, _, err := store.Tasks.RetryTask(ctx, id); err != nil && exactlyonce.ErrorCode(err) != exactlyonce.ESTATE {
				return err
			}
		}
		return nil
	})
	time.AfterFunc(3*time.Second, func() { close(stop) })
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// The rest, with nothing racing: retried and delivered to the end.
	for {
		if _, err := retryUntilDone(ctx, store, ref); err != nil {
			require.NoError(t, err)
		}
		var left int64
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events WHERE kind = 'task' AND reference_id = ? AND state <> 10", ref).Scan(&left))
		if left == 0 {
			break
		}
		for {
			var open int64
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events WHERE kind = 'task' AND reference_id = ? AND state < 2", ref).Scan(&open))
			require.LessOrEqual(t, open, int64(1), "one open task at a time (the head; the others queued)")
			if more, err := deliver(); err != nil || !more {
				require.NoError(t, err)
				break
			}
		}
	}
	seen := map[int64]bool{}
	for i, d := range delivered {
		require.False(t, seen[d[0]], "task %d delivered twice", d[0])
		seen[d[0]] = true
		if i > 0 {
			require.Greater(t, d[1], delivered[i-1][1], "task %d (position %d) delivered after task %d (position %d)", d[0], d[1], delivered[i-1][0], delivered[i-1][1])
		}
	}
	var all int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events WHERE kind = 'task' AND reference_id = ?", ref).Scan(&all))
	require.Len(t, delivered, int(all))
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}
