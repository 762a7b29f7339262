package taskstore_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
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
	t.Parallel()
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
	t.Parallel()
	raceRetriesInParts(t, "parts-race", false)
}

// The same race, but the reference has a task open (claimed, processing) when the retries begin:
// their first parts go to the end behind it and hold their frontier; the processor settles the
// open task once a first part has committed, then delivers, each settlement handing the next task
// on to its claim (chain), and no delivery fails; before each later part a create of the reference
// and two passes of the processor, so that the deliveries catch up with the parts. Besides the
// checks above, the failed tasks (but those retried on their own) are delivered together, in
// order: no create between them. Before, this case went whole.
func TestRetriesToTheEndBehindAnOpenTaskRacingDeliveriesKeepOrder(t *testing.T) {
	t.Parallel()
	raceRetriesInParts(t, "parts-race-open", true)
}

// raceRetriesInParts runs the race of TestRetriesInPartsRacingDeliveriesCreatesAndTaskRetriesKeepOrder
// on reference ref, with a task of it open before the retries begin if behindOpen.
func raceRetriesInParts(t *testing.T, ref string, behindOpen bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, store, failedIDs := failedReference(ctx, t, ref, 40)
	firstPart, stop := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var passes atomic.Int64 // the processor's passes over the reference's due tasks
	taskstore.RetryInParts(store.Tasks, 3, time.Minute, func(n int) error {
		if n < 2 || !behindOpen {
			return nil
		}
		once.Do(func() { close(firstPart) })
		// Behind an open task, the deliveries race the parts: before each part after the first,
		// a create of the reference (it queues behind every place the retry took), and the
		// processor makes two more passes (it delivers what is due meanwhile, up to the
		// frontier), so that the deliveries catch up with the parts, the case that kept this
		// retry whole.
		if _, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(ref, 1000+n)}); err != nil {
			return err
		}
		for p := passes.Load(); passes.Load() < p+2; {
			select {
			case <-stop:
				return nil
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	})
	var openClaim exactlyonce.Claim
	var openTask exactlyonce.Event
	if behindOpen {
		openClaim, openTask = claimTask(ctx, t, store, createOne(ctx, t, store, ref, 40))
	}

	var mu sync.Mutex
	var delivered [][2]int64 // id, position at its claim
	attempts := 0
	var settleChain func(exactlyonce.Claim, exactlyonce.Event) error
	alone := map[int64]bool{} // the failed tasks retried on their own
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
		return true, settleChain(c, claimed.Leased[0])
	}
	// settleChain settles e (every third attempt fails for good), and, behind an open task, the
	// tasks each settlement hands on to c, in turn.
	settleChain = func(c exactlyonce.Claim, e exactlyonce.Event) error {
		for {
			mu.Lock()
			attempts++
			ok := attempts%3 != 0 || behindOpen
			mu.Unlock()
			s, err := store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: e, Delivered: ok, Final: !ok,
				Attempt: exactlyonce.Attempt{Number: e.Attempts + 1, Started: time.Now(), Status: 200}}}, behindOpen)
			if err != nil {
				return err
			}
			if ok {
				mu.Lock()
				delivered = append(delivered, [2]int64{e.ID, e.Task.Position})
				mu.Unlock()
			}
			if len(s.Next) == 0 {
				return nil
			}
			e = s.Next[0]
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
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
		if behindOpen {
			select {
			case <-firstPart:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := settleChain(openClaim, openTask); err != nil {
				return err
			}
		}
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			if _, err := deliver(); err != nil {
				return err
			}
			passes.Add(1)
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
			_, _, err = store.Tasks.RetryTask(ctx, id)
			if err != nil && exactlyonce.ErrorCode(err) != exactlyonce.ESTATE {
				return err
			}
			if err == nil {
				mu.Lock()
				alone[id] = true
				mu.Unlock()
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
	if behindOpen && len(alone) < len(failedIDs) {
		// No delivery fails in this run, so one bulk retry placed the failed tasks (but those
		// retried on their own, which went to the end): they are delivered one after the other,
		// in their order, no task created meanwhile between them. With the settlement promoting
		// the frontier as any queued task, a create between parts came between them.
		var mine []int64
		for _, id := range failedIDs {
			if !alone[id] {
				mine = append(mine, id)
			}
		}
		at := slices.IndexFunc(delivered, func(d [2]int64) bool { return d[0] == mine[0] })
		require.GreaterOrEqual(t, at, 0)
		require.GreaterOrEqual(t, len(delivered), at+len(mine))
		var got []int64
		for _, d := range delivered[at : at+len(mine)] {
			got = append(got, d[0])
		}
		require.Equal(t, mine, got, "the retried tasks delivered together, in order")
	}
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}
