package taskstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// A bulk retry of a reference with no open task, whose failed tasks go back in their places,
// decides and writes before it takes the reference's bucket, and holds the bucket only to check
// that nothing of the reference changed meanwhile and to commit (retry_reference.go,
// retryInPlaceFirst). These tests hold such a retry after its writes, before the bucket, and run a
// create there: of another reference of the bucket (it does not wait), of the same reference (the
// retry's check sees it and the retry decides again with the bucket held), and of the same
// reference whose new task is then claimed (the retry goes to the end, behind it).

// failedReference returns a new database, its store, and n tasks of reference ref, every one failed.
func failedReference(ctx context.Context, t *testing.T, ref string, n int) (*sql.DB, *wire.Stores, []int64) {
	t.Helper()
	db, store := dbWithStores(t, 8)
	var ids []int64
	for i := range n {
		ids = append(ids, createOne(ctx, t, store, ref, i))
	}
	for _, id := range ids {
		_, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE id = ?", id)
		require.NoError(t, err)
	}
	return db, store, ids
}

// heldRetry starts store's RetryReference(ref) and returns once it is held after its writes, before
// the bucket; release lets it go on and returns its outcome.
func heldRetry(ctx context.Context, t *testing.T, store *wire.Stores, ref string) (release func() (exactlyonce.RetriedReference, error)) {
	t.Helper()
	var out exactlyonce.RetriedReference
	wait := held(t, store, func() (err error) {
		out, err = store.Tasks.RetryReference(ctx, ref)
		return err
	})
	return func() (exactlyonce.RetriedReference, error) {
		err := wait()
		return out, err
	}
}

// held runs call, a retry, and returns once it is held after its writes, before the bucket; the
// function it returns lets it go on and returns its error.
func held(t *testing.T, store *wire.Stores, call func() error) (release func() error) {
	t.Helper()
	entered, hold := make(chan struct{}, 4), make(chan struct{})
	taskstore.HoldRetriesBeforeBucket(store.Tasks, entered, hold)
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = call()
	}()
	select {
	case <-entered:
	case <-done:
		t.Fatalf("the retry returned (%v) without going in place first", err)
	}
	return func() error {
		close(hold)
		<-done
		return err
	}
}

// createWithin creates a task of ref and fails the test if the create has not returned within 20 s
// (it waits for a lock the held retry keeps).
func createWithin(ctx context.Context, t *testing.T, store *wire.Stores, ref string, i int) exactlyonce.CreatedTask {
	t.Helper()
	done := make(chan struct{})
	var got []exactlyonce.CreatedTask
	var err error
	go func() {
		defer close(done)
		got, err = store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(ref, i)})
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("a create of %q waited for the held retry", ref)
	}
	require.NoError(t, err)
	return got[0]
}

// stateOf is each of a reference's tasks in `events`, in position order: id and stored state. Each
// task is in `events` once (a row per id).
func statesOf(ctx context.Context, t *testing.T, db *sql.DB, ref string) [][2]int64 {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT id, state FROM events WHERE kind = 'task' AND reference_id = ? ORDER BY position", ref)
	require.NoError(t, err)
	defer rows.Close()
	var out [][2]int64
	seen := map[int64]bool{}
	for rows.Next() {
		var e [2]int64
		require.NoError(t, rows.Scan(&e[0], &e[1]))
		require.False(t, seen[e[0]], "task %d is in events twice", e[0])
		seen[e[0]] = true
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

const (
	pending    = int64(exactlyonce.Pending)
	processing = int64(exactlyonce.Processing)
	queued     = int64(exactlyonce.Queued)
)

func TestARetryInPlaceLetsACreateOfAnotherReferenceOfItsBucketThrough(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "inplace"
	db, store, ids := failedReference(ctx, t, ref, 3)
	neighbour := taskstore.SameSlot(ref, 1)[0]
	require.Equal(t, taskstore.ReferenceHash(ref)%64, taskstore.ReferenceHash(neighbour)%64, "one bucket")

	release := heldRetry(ctx, t, store, ref)
	other := createWithin(ctx, t, store, neighbour, 0)
	require.True(t, other.Head)
	got, err := release()
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Head: ids[0], Placement: exactlyonce.RetryInPlace}, got)
	require.Equal(t, [][2]int64{{ids[0], pending}, {ids[1], queued}, {ids[2], queued}}, statesOf(ctx, t, db, ref))
	require.Equal(t, [][2]int64{{other.ID, pending}}, statesOf(ctx, t, db, neighbour))
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// A create of the reference while the retry is held does not see the retry's uncommitted head, and
// commits its task as the reference's head; the retry, once it holds the bucket, sees it, rolls
// back and decides again with the bucket and the new head locked: the new task has not started, so
// the failed tasks still go back in their places, before it, and it waits behind them.
func TestARetryInPlaceSeesACreateOfItsReferenceThatCameMeanwhile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "inplace"
	db, store, ids := failedReference(ctx, t, ref, 3)

	release := heldRetry(ctx, t, store, ref)
	created := createWithin(ctx, t, store, ref, 3)
	require.True(t, created.Head, "the retry's head is not committed: the create heads the reference")
	got, err := release()
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Head: ids[0], Placement: exactlyonce.RetryInPlace}, got)
	require.Equal(t, [][2]int64{{ids[0], pending}, {ids[1], queued}, {ids[2], queued}, {created.ID, queued}}, statesOf(ctx, t, db, ref),
		"one head, the first failed task; the new task behind the retried ones")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// As above, but the new task is claimed (so started) before the retry goes on: the failed tasks
// cannot go back before it, and go to the end, behind it, in their order.
func TestARetryInPlaceGoesToTheEndBehindATaskCreatedAndStartedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "inplace"
	db, store, ids := failedReference(ctx, t, ref, 3)

	release := heldRetry(ctx, t, store, ref)
	created := createWithin(ctx, t, store, ref, 3)
	require.True(t, created.Head)
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
	claimed, err := store.Events.ClaimIDs(ctx, c, []int64{created.ID}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, claimed.Leased, 1, "the held retry's uncommitted rows do not keep the new head from its claim")
	got, err := release()
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Placement: exactlyonce.RetryAtEnd}, got)
	require.Equal(t, [][2]int64{{created.ID, processing}, {ids[0], queued}, {ids[1], queued}, {ids[2], queued}}, statesOf(ctx, t, db, ref),
		"the started task first, the retried ones behind it")
	want := truth(ctx, t, db, ref)
	require.Equal(t, want, listed(ctx, t, store, ref))
	entries, _, err := taskstore.DirectoryEntries(ctx, db, ref)
	require.NoError(t, err)
	require.Equal(t, want, entries)
}

// Creates of a reference and of its neighbours in the bucket race bulk retries of the reference,
// its tasks failed again by hand before each retry: whatever the interleaving, each reference has
// one open task at most, each task is in `events` once, and its listing is `events`' order.
func TestCreatesRacingRetriesInPlaceKeepOneHeadAndEachTaskOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ref = "inplace"
	db, store, _ := failedReference(ctx, t, ref, 3)
	refs := append([]string{ref}, taskstore.SameSlot(ref, 3)...)
	const creators, perCreator, retries = 4, 15, 15
	together(t, creators+1, func(w int) error {
		if w == creators {
			for range retries {
				// Fail every task of the reference not failed yet (by hand: its head and the tasks
				// queued behind it, the creates' included), then retry them all.
				if _, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = attempts + 1, processed_at = NOW(6) WHERE kind = 'task' AND reference_id = ? AND state IN (0, 2)", ref); err != nil {
					return err
				}
				if _, err := store.Tasks.RetryReference(ctx, ref); err != nil {
					return err
				}
			}
			return nil
		}
		for i := range perCreator {
			if _, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(refs[(w+i)%len(refs)], 100*w+i)}); err != nil {
				return err
			}
		}
		return nil
	})
	var total int
	for _, r := range refs {
		states := statesOf(ctx, t, db, r)
		total += len(states)
		open := 0
		for _, s := range states {
			if s[1] < queued {
				open++
			}
		}
		require.LessOrEqual(t, open, 1, "%s: %v", r, states)
		require.Equal(t, truth(ctx, t, db, r), listed(ctx, t, store, r), r)
	}
	require.Equal(t, 3+creators*perCreator, total)
}

// Every manual retry locks its failed tasks before its bucket, so a retry of one task that comes
// while a bulk retry of its reference holds that task (and waits for the bucket) holds no bucket
// itself: it waits for the task, and then finds it retried (a 409), with no deadlock. (With the
// task's retry taking the bucket first, the two wait for each other, InnoDB rolls one back, and the
// test fails on the deadlock counted.)
func TestARetryOfATaskWaitsForABulkRetryOfItsReferenceWithoutADeadlock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "inplace"
	db, store, ids := failedReference(ctx, t, ref, 3)
	before := store.DB.Stats()

	release := heldRetry(ctx, t, store, ref)
	done := make(chan struct{})
	var retryErr error
	go func() {
		defer close(done)
		_, _, retryErr = store.Tasks.RetryTask(ctx, ids[0])
	}()
	awaitStatement(t, db, "SELECT state, COALESCE(reference_id, '')", done)
	got, err := release()
	require.NoError(t, err)
	<-done
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Head: ids[0], Placement: exactlyonce.RetryInPlace}, got)
	require.Equal(t, exactlyonce.ESTATE, exactlyonce.ErrorCode(retryErr), "%v", retryErr)
	require.Contains(t, retryErr.Error(), fmt.Sprintf("task %d is pending, not failed", ids[0]), "the state it is in now")
	require.Equal(t, before.Deadlocks, store.DB.Stats().Deadlocks, "no deadlock")
	require.Equal(t, [][2]int64{{ids[0], pending}, {ids[1], queued}, {ids[2], queued}}, statesOf(ctx, t, db, ref))
}

// A retry of one task, the last of its reference (no open task), goes in place the same way: a
// create of another reference of the bucket does not wait for it; a create of the same reference
// meanwhile is seen, and the retried task goes back before it.
func TestARetryOfATaskInPlaceHoldsItsBucketOnlyToCheckAndCommit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "inplace"
	db, store, ids := failedReference(ctx, t, ref, 1)
	retry := func() (func() error, *exactlyonce.RetryPlacement, *bool) {
		var placement exactlyonce.RetryPlacement
		var head bool
		return held(t, store, func() (err error) {
			placement, head, err = store.Tasks.RetryTask(ctx, ids[0])
			return err
		}), &placement, &head
	}

	release, placement, head := retry()
	other := createWithin(ctx, t, store, taskstore.SameSlot(ref, 1)[0], 0)
	require.True(t, other.Head)
	require.NoError(t, release())
	require.Equal(t, exactlyonce.RetryInPlace, *placement)
	require.True(t, *head)
	require.Equal(t, [][2]int64{{ids[0], pending}}, statesOf(ctx, t, db, ref))

	_, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = attempts + 1, processed_at = NOW(6) WHERE id = ?", ids[0])
	require.NoError(t, err)
	release, placement, head = retry()
	created := createWithin(ctx, t, store, ref, 1)
	require.True(t, created.Head, "the retry's head is not committed: the create heads the reference")
	require.NoError(t, release())
	require.Equal(t, exactlyonce.RetryInPlace, *placement)
	require.True(t, *head)
	require.Equal(t, [][2]int64{{ids[0], pending}, {created.ID, queued}}, statesOf(ctx, t, db, ref),
		"one head, the retried task; the new task behind it")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// A task's retry that finds its task not failed under the lock (another retry put it back, and
// its delivery was under way) while it fails again before the retry reads its state again: the
// task is failed when the retry answers, so the retry applies to it. Before, it answered a 409
// that said "task 1 is failed, not failed", refusing the retry of a failed task (seen through the
// console: two operators' retries of a task racing its delivery).
func TestARetryOfATaskThatFailedAgainMeanwhileApplies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, store, ids := failedReference(ctx, t, "again", 1)
	_, _, err := store.Tasks.RetryTask(ctx, ids[0])
	require.NoError(t, err)
	missed := 0
	taskstore.OnRetryMissed(store.Tasks, func() {
		missed++
		if missed == 1 {
			// Its delivery fails, committed between the retry's lock and its second read.
			_, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = attempts + 1, processed_at = NOW(6) WHERE id = ?", ids[0])
			require.NoError(t, err)
		}
	})
	_, head, err := store.Tasks.RetryTask(ctx, ids[0])
	require.NoError(t, err, "the task is failed: its retry applies")
	require.True(t, head)
	require.Equal(t, 1, missed)
	require.Equal(t, [][2]int64{{ids[0], pending}}, statesOf(ctx, t, db, "again"))

	// A task that is not failed when the retry reads it again is still refused, with its state now.
	_, _, err = store.Tasks.RetryTask(ctx, ids[0])
	require.Equal(t, exactlyonce.ESTATE, exactlyonce.ErrorCode(err), "%v", err)
	require.Contains(t, err.Error(), fmt.Sprintf("task %d is pending, not failed", ids[0]))
}
