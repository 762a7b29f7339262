package taskstore_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// A reference's bulk retry goes in parts (retry_reference.go): these tests make a part 5 failed
// tasks, so that a reference of 12 takes three, and act between them.

// claimable tries to claim task id as a processor would and says whether it was leased (and then
// releases nothing: the tests call it only where the answer must be no, or at the end).
func claimable(ctx context.Context, t *testing.T, store *wire.Stores, id int64) bool {
	t.Helper()
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
	claimed, err := store.Events.ClaimIDs(ctx, c, []int64{id}, mysqltest.LeaseAll)
	require.NoError(t, err)
	return len(claimed.Leased) == 1
}

func TestARetryInPartsPutsEveryFailedTaskBackInItsPlaceAndLetsCreatesThrough(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts"
	db, store, ids := failedReference(ctx, t, ref, 12)
	other := taskstore.SameSlot(ref, 1)[0] // a reference of the same bucket
	var mine, theirs exactlyonce.CreatedTask
	parts := 0
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		parts = n
		if n != 2 {
			return nil
		}
		// Between the first part and the second: the bucket is free (each create returns at once:
		// createWithin fails the test after 20 s), the head the first part made is held (no claim
		// takes it, so nothing of the reference is delivered past the tasks not yet retried), and a
		// create of the reference queues behind it, as behind the whole retry.
		theirs = createWithin(ctx, t, store, other, 1)
		mine = createWithin(ctx, t, store, ref, 12)
		require.False(t, mine.Head, "a create between parts queues behind the retry's head")
		require.False(t, claimable(ctx, t, store, ids[0]), "the head is held until the last part")
		return nil
	})
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, 3, parts)
	require.True(t, theirs.Head)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Placement: exactlyonce.RetryInPlace, Head: ids[0]}, got)
	want := [][2]int64{{ids[0], pending}}
	for _, id := range ids[1:] {
		want = append(want, [2]int64{id, queued})
	}
	want = append(want, [2]int64{mine.ID, queued})
	require.Equal(t, want, statesOf(ctx, t, db, ref), "every failed task in its place, in order, the new task after them")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
	require.True(t, claimable(ctx, t, store, ids[0]), "the last part released the head")
}

func TestARetryInPartsToTheEndKeepsItsPositionsAheadOfACreateBetweenParts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-end"
	db, store, ids := failedReference(ctx, t, ref, 12)
	// A later task completed: the failed ones go to the end.
	done := createOne(ctx, t, store, ref, 12)
	_, err := db.ExecContext(ctx, "UPDATE events SET state = 10, attempts = 1, processed_at = NOW(6) WHERE id = ?", done)
	require.NoError(t, err)
	var mine exactlyonce.CreatedTask
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		if n == 2 {
			mine = createWithin(ctx, t, store, ref, 13)
			require.False(t, mine.Head)
		}
		return nil
	})
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Placement: exactlyonce.RetryAtEnd, Head: ids[0]}, got)
	want := [][2]int64{{done, int64(exactlyonce.Processed)}, {ids[0], pending}}
	for _, id := range ids[1:] {
		want = append(want, [2]int64{id, queued})
	}
	want = append(want, [2]int64{mine.ID, queued})
	require.Equal(t, want, statesOf(ctx, t, db, ref), "the completed task, the retried ones in order, then the create between parts")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

func TestARetryStoppedBetweenPartsLosesNothingAndARepeatFinishesIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-stop"
	db, store, ids := failedReference(ctx, t, ref, 12)
	stop := errors.New("stopped between parts")
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		if n == 2 {
			return stop // the process is gone before its second part
		}
		return nil
	})
	_, err := store.Tasks.RetryReference(ctx, ref)
	require.Error(t, err)
	requireFirstPartHeldThenRepeatFinishes(ctx, t, db, store, ref, ids)
}

func TestARetryInPartsStopsAtItsBudgetAndSaysMore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-budget"
	db, store, ids := failedReference(ctx, t, ref, 12)
	taskstore.RetryInParts(store.Tasks, 5, time.Nanosecond, nil) // one part a call
	var all []int64
	for call := 1; ; call++ {
		got, err := store.Tasks.RetryReference(ctx, ref)
		require.NoError(t, err)
		all = append(all, got.IDs...)
		require.Equal(t, exactlyonce.RetryInPlace, got.Placement)
		if !got.More {
			require.Equal(t, 3, call)
			require.Equal(t, ids[0], got.Head, "the last call releases the head and names it")
			break
		}
		require.Zero(t, got.Head, "a held head has no queue message yet")
		require.Len(t, got.IDs, 5)
	}
	require.Equal(t, ids, all)
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// The failed tasks a retry in parts has left retried one by one between its calls (each to the end,
// behind the held head): the next call finds none and releases the head.
func TestARetryInPartsWhoseRestWasRetriedTaskByTaskReleasesItsHead(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-rest"
	db, store, ids := failedReference(ctx, t, ref, 8)
	taskstore.RetryInParts(store.Tasks, 5, time.Nanosecond, nil)
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.True(t, got.More)
	for _, id := range ids[5:] {
		placement, head, err := store.Tasks.RetryTask(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.RetryAtEnd, placement)
		require.False(t, head)
	}
	require.False(t, claimable(ctx, t, store, ids[0]))
	got, err = store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: []int64{}, Head: ids[0]}, got)
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
	require.True(t, claimable(ctx, t, store, ids[0]), "released")
}

// A reference whose failed tasks are followed by a pending head that has not started: the first
// part puts it back in the queue behind the held head, and it is delivered after every retried task.
func TestARetryInPartsRequeuesAPendingHeadBehindThem(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-head"
	db, store, ids := failedReference(ctx, t, ref, 7)
	head := createOne(ctx, t, store, ref, 7) // no open task: it heads the reference, pending
	taskstore.RetryInParts(store.Tasks, 5, time.Nanosecond, nil)
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.True(t, got.More)
	require.False(t, claimable(ctx, t, store, head), "requeued")
	require.False(t, claimable(ctx, t, store, ids[0]), "held")
	got, err = store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids[5:], Placement: exactlyonce.RetryInPlace, Head: ids[0]}, got)
	want := [][2]int64{{ids[0], pending}}
	for _, id := range append(ids[1:], head) {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref))
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// requireFirstPartHeldThenRepeatFinishes checks a reference of 12 failed tasks whose retry in parts
// of 5 stopped before its second part: the first part committed whole, its head held (claimed by
// nothing), the others still failed, each task once; then a repeated retry retries the rest in
// their places and releases the head.
func requireFirstPartHeldThenRepeatFinishes(ctx context.Context, t *testing.T, db *sql.DB, store *wire.Stores, ref string, ids []int64) {
	t.Helper()
	want := [][2]int64{{ids[0], pending}}
	for i, id := range ids[1:] {
		state := queued
		if i+1 >= 5 {
			state = int64(exactlyonce.Failed)
		}
		want = append(want, [2]int64{id, state})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref), "the first part committed whole, the others still failed, each task once")
	require.False(t, claimable(ctx, t, store, ids[0]), "the head stays held")

	taskstore.RetryInParts(store.Tasks, 5, time.Minute, nil)
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids[5:], Placement: exactlyonce.RetryInPlace, Head: ids[0]}, got,
		"the repeat retries the rest, in their places")
	want = [][2]int64{{ids[0], pending}}
	for _, id := range ids[1:] {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref))
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
	require.True(t, claimable(ctx, t, store, ids[0]))
}

// A call reads the reference's failed set once, not once a part (each read scans the whole failed
// set: with 60,000 failed tasks, 60,000 rows for each part of 500): its later parts take their
// tasks from what it read, while the head its last part holds is still the reference's only open
// task, held.
func TestARetryInPartsReadsTheFailedSetOncePerCall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-once"
	db, store, ids := failedReference(ctx, t, ref, 12)
	reads := taskstore.CountFailedSetReads(store.Tasks)
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, nil)
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Placement: exactlyonce.RetryInPlace, Head: ids[0]}, got)
	require.Equal(t, int64(1), reads(), "three parts, one read of the failed set")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// What a call read of the failed set is not used once it may be wrong: between its parts a task
// of it is retried on its own (to the end), and the held head's hold ends, the head is claimed and
// fails for good again (a task failed that the call's read did not see). The parts go on from a
// fresh read: every task once, one open, the failed head retried again, in order.
func TestARetryInPartsReadsTheFailedSetAgainWhenItMayHaveChanged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-stale"
	db, store, ids := failedReference(ctx, t, ref, 12)
	reads := taskstore.CountFailedSetReads(store.Tasks)
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		switch n {
		case 2:
			placement, _, err := store.Tasks.RetryTask(ctx, ids[7])
			require.NoError(t, err)
			require.Equal(t, exactlyonce.RetryAtEnd, placement)
		case 3:
			_, err := db.ExecContext(ctx, "UPDATE events SET next_attempt_at = NOW(6) WHERE id = ?", ids[0]) // the hold ends
			require.NoError(t, err)
			c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
			claimed, err := store.Events.ClaimIDs(ctx, c, []int64{ids[0]}, mysqltest.LeaseAll)
			require.NoError(t, err)
			require.Len(t, claimed.Leased, 1)
			e := claimed.Leased[0]
			_, err = store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: e, Final: true,
				Attempt: exactlyonce.Attempt{Number: e.Attempts + 1, Started: time.Now(), Status: 500, Error: "down"}}}, false)
			require.NoError(t, err)
		}
		return nil
	})
	var all []int64
	for {
		got, err := store.Tasks.RetryReference(ctx, ref)
		require.NoError(t, err)
		all = append(all, got.IDs...)
		if !got.More {
			break
		}
	}
	seen := map[int64]int{}
	for _, id := range all {
		seen[id]++
	}
	require.Equal(t, 2, seen[ids[0]], "the head, retried, failed again and retried again")
	require.Zero(t, seen[ids[7]], "retried on its own")
	require.Greater(t, reads(), int64(1), "read again")
	// The head's failure came after tasks behind it had been attempted (the first part's, retried
	// before): the fresh read decides as any retry would, to the end, behind the task its
	// settlement promoted and the one retried on its own.
	want := [][2]int64{{ids[1], pending}, {ids[2], queued}, {ids[3], queued}, {ids[4], queued}, {ids[7], queued}, {ids[0], queued}}
	for _, id := range append(ids[5:7:7], ids[8:]...) {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref), "every task once, one open, in order")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// forgottenDirectory is failedReference's database as migration 0016 leaves one that held tasks:
// its directory empty and not complete (the backfill not begun), read by a new store.
func forgottenDirectory(ctx context.Context, t *testing.T, db *sql.DB) *wire.Stores {
	t.Helper()
	require.NoError(t, mysqltest.ForgetReferenceDirectory(ctx, db))
	return storesOn(t, db)
}

// While the directory of a database migrated with tasks in it is not complete, a bulk retry goes
// in parts too (it went whole, in one transaction bounded by nothing but the reference's failed
// tasks): the first part decides by the scan, which leaves the failed tasks out by their state,
// and the others continue its held head. In place, then to the end with a create between parts.
func TestARetryInPartsWhileTheDirectoryIsIncomplete(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-migrated"
	db, _, ids := failedReference(ctx, t, ref, 12)
	store := forgottenDirectory(ctx, t, db)
	parts := 0
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		parts = n
		if n == 2 {
			require.False(t, claimable(ctx, t, store, ids[0]), "the head is held between parts")
		}
		return nil
	})
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, 3, parts, "in parts")
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Placement: exactlyonce.RetryInPlace, Head: ids[0]}, got)
	want := [][2]int64{{ids[0], pending}}
	for _, id := range ids[1:] {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref))
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))

	// All delivered but the first two and the last, which failed: the last after a delivered
	// task, so they all go to the end, in their order, and a create between parts after them.
	_, err = db.ExecContext(ctx, "UPDATE events SET state = IF(id IN (?, ?, ?), 20, 10), attempts = attempts + 1, processed_at = NOW(6) WHERE kind = 'task' AND reference_id = ?",
		ids[0], ids[1], ids[11], ref)
	require.NoError(t, err)
	extra := []int64{createOne(ctx, t, store, ref, 20)} // heads the reference: no open task
	_, err = db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE id = ?", extra[0])
	require.NoError(t, err)
	for i := range 4 { // more failed tasks after it, so that the retry takes two parts
		id := createOne(ctx, t, store, ref, 30+i)
		_, err = db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE id = ?", id)
		require.NoError(t, err)
		extra = append(extra, id)
	}
	store = forgottenDirectory(ctx, t, db)
	failed := append([]int64{ids[0], ids[1], ids[11]}, extra...)
	var mine exactlyonce.CreatedTask
	parts = 0
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		parts = n
		if n == 2 {
			mine = createWithin(ctx, t, store, ref, 40)
			require.False(t, mine.Head)
		}
		return nil
	})
	got, err = store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, 2, parts, "in parts")
	require.Equal(t, exactlyonce.RetriedReference{IDs: failed, Placement: exactlyonce.RetryAtEnd, Head: ids[0]}, got)
	states := statesOf(ctx, t, db, ref)
	var tail [][2]int64
	for _, st := range states {
		if st[1] != int64(exactlyonce.Processed) {
			tail = append(tail, st)
		}
	}
	want = [][2]int64{{ids[0], pending}}
	for _, id := range append(failed[1:], mine.ID) {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, tail, "the failed tasks at the end in their order, the create between parts after them")
	require.Equal(t, int64(exactlyonce.Processed), states[0][1], "the delivered ones first")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// The first part's question "has a later task started?" does not ask about the failed tasks the
// call has just read (each statement of 500 reads every subpartition its ids fall in: a reference
// whose last 60,000 tasks failed took 120 statements, 2.4 s, in the first part), only about the
// later tasks it did not read failed, or whose directory entry has moved since (none here).
func TestARetryInPartsDoesNotAskAboutTheFailedTasksItRead(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-asked"
	db, store, ids := failedReference(ctx, t, ref, 12)
	asked := taskstore.CountStartedAsked(store.Tasks)
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, nil)
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Placement: exactlyonce.RetryInPlace, Head: ids[0]}, got)
	require.Zero(t, asked(), "the 11 later tasks are all failed, as read")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// A failed task the first part read, retried to the end on its own before the part reads the
// directory (after its read of the failed set): it has started (attempted, and no longer failed),
// so the failed tasks go to the end, as they would behind that retry. Two things each make the
// part see it, although its read found it failed: its directory entry has moved (the part asks
// about it), and it heads the reference now (the check under the bucket finds it open and the
// part decides again). With the position guard taken out the test still passes: in this case
// (no open task when read) a task retried meanwhile is always open, so the check alone suffices;
// the guard keeps the question right by itself.
func TestARetryInPartsAsksAboutAFailedTaskItReadThatMovedSince(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-moved"
	db, store, ids := failedReference(ctx, t, ref, 12)
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, nil)
	once := false
	taskstore.AfterFailedSetRead(store.Tasks, func() {
		if once {
			return
		}
		once = true
		placement, _, err := store.Tasks.RetryTask(ctx, ids[7])
		require.NoError(t, err)
		require.Equal(t, exactlyonce.RetryAtEnd, placement)
	})
	var all []int64
	placement := exactlyonce.RetryPlacement("")
	for {
		got, err := store.Tasks.RetryReference(ctx, ref)
		require.NoError(t, err)
		all = append(all, got.IDs...)
		placement = cmp.Or(placement, got.Placement)
		if !got.More {
			break
		}
	}
	require.Equal(t, exactlyonce.RetryAtEnd, placement)
	want := [][2]int64{{ids[7], pending}}
	for _, id := range append(ids[:7:7], ids[8:]...) {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref), "the task retried on its own first, the others behind it in order")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}
