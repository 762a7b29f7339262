package taskstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestMain runs the tests, or, started again by a test in the child role "retrier", a process that
// retries reference RETRY_REFERENCE in parts of 5 and, before its second part, says so and waits to
// be killed ("retrier-inside": inside its first part, its writes done, before its commit); or in
// the roles "backfiller" and "compactor", a process that backfills or compacts the reference
// directory as the sweeper's maintenance does and stops for good at the step KILL_AT of its second
// transaction (directoryKilledAt).
func TestMain(m *testing.M) {
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// retrierKilledAt makes 12 failed tasks of reference ref, runs prepare if given (before the retry),
// starts a child process in role to retry them, SIGKILLs it once it prints line, and returns the
// database, its stores and the tasks' ids.
func retrierKilledAt(ctx context.Context, t *testing.T, ref, role, line string, prepare ...func(*sql.DB, *wire.Stores)) (*sql.DB, *wire.Stores, []int64) {
	t.Helper()
	db, dsn := testdb.DB(t, 8)
	store := storesOn(t, db)
	var ids []int64
	for i := range 12 {
		ids = append(ids, createOne(ctx, t, store, ref, i))
	}
	for _, id := range ids {
		_, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE id = ?", id)
		require.NoError(t, err)
	}
	for _, p := range prepare {
		p(db, store)
	}
	retrier := child.Start(t, role, "DB_DSN="+dsn, "RETRY_REFERENCE="+ref)
	_, err := retrier.WaitLine(line, 30*time.Second)
	require.NoError(t, err)
	retrier.Kill()
	return db, store, ids
}

func runChild(role string) int {
	if role == "backfiller" || role == "compactor" {
		return runDirectoryChild(role)
	}
	if role != "retrier" && role != "retrier-inside" {
		fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
		return 2
	}
	store, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		if n == 2 && role == "retrier" {
			fmt.Println("between parts")
			select {} // until killed
		}
		return nil
	})
	if role == "retrier-inside" {
		// Inside the first part: its tasks written (and its head held), not committed.
		entered := make(chan struct{}, 1)
		taskstore.HoldRetriesBeforeBucket(store.Tasks, entered, make(chan struct{}))
		go func() {
			<-entered
			fmt.Println("inside a part")
		}()
	}
	if _, err := store.Tasks.RetryReference(context.Background(), os.Getenv("RETRY_REFERENCE")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("done")
	return 0
}

// Invariant: a process SIGKILLed between two parts of a reference's bulk retry loses nothing and
// duplicates nothing: its first part is committed whole (the first five failed tasks back in their
// places, the head held, so nothing of the reference is claimed), the rest are still failed, each
// task is in events once, and a repeated retry from another process finishes the job in order.
// TestARetryStoppedBetweenPartsLosesNothingAndARepeatFinishesIt fails the second part in the same
// process; this one kills a real process there. With the hold taken out of the first part, the
// head is claimable after the kill and the test fails.
func TestARetryKilledBetweenPartsLosesNothingAndARepeatFinishesIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-kill"
	db, store, ids := retrierKilledAt(ctx, t, ref, "retrier", "between parts")
	requireFirstPartHeldThenRepeatFinishes(ctx, t, db, store, ref, ids)
}

// Invariant: a process SIGKILLed inside a part of a reference's bulk retry (its first part, its
// tasks written and its head held, before its commit) leaves nothing of that part: every task
// still failed, none open (nothing held, nothing for a claim), each once; a repeat from another
// process retries them all in their places.
func TestARetryKilledInsideAPartLeavesNothingOfItAndARepeatFinishesIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "parts-kill-inside"
	db, store, ids := retrierKilledAt(ctx, t, ref, "retrier-inside", "inside a part")
	// What is committed: nothing of the killed part. (The repeat below waits for the killed
	// transaction's row locks until the server has rolled it back.)
	var failed [][2]int64
	for _, id := range ids {
		failed = append(failed, [2]int64{id, int64(exactlyonce.Failed)})
	}
	require.Equal(t, failed, statesOf(ctx, t, db, ref), "nothing of the killed part, each task once")
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, nil)
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Placement: exactlyonce.RetryInPlace, Head: ids[0]}, got)
	want := [][2]int64{{ids[0], pending}}
	for _, id := range ids[1:] {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref))
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}

// retrierBehindOpenKilled is retrierKilledAt between parts of a retry to the end behind an open
// task: 12 failed tasks, then a 13th created and claimed (processing) before the retry; it returns
// the open task with its claim too. What is committed after the kill: the first part whole (its
// five tasks queued behind the open task, the fifth, its frontier, held), the others still failed,
// each task once.
func retrierBehindOpenKilled(ctx context.Context, t *testing.T, ref string) (*sql.DB, *wire.Stores, []int64, exactlyonce.Claim, exactlyonce.Event) {
	t.Helper()
	var c exactlyonce.Claim
	var open exactlyonce.Event
	db, store, ids := retrierKilledAt(ctx, t, ref, "retrier", "between parts", func(_ *sql.DB, store *wire.Stores) {
		c, open = claimTask(ctx, t, store, createOne(ctx, t, store, ref, 12))
	})
	var want [][2]int64
	for _, id := range ids[5:] {
		want = append(want, [2]int64{id, int64(exactlyonce.Failed)})
	}
	want = append(want, [2]int64{open.ID, processing})
	for _, id := range ids[:5] {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref), "the first part committed whole, the others still failed, each task once")
	return db, store, ids, c, open
}

// Invariant: a process SIGKILLed between two parts of a retry to the end behind an open task loses
// nothing and duplicates nothing, and while its frontier is held nothing passes it: the open task
// settled and the reference delivered as far as it can (a create made after the kill waits behind
// the failed tasks not retried yet); a repeat from another process retries the rest after the
// frontier, and every task is delivered once, in order, the create last.
func TestARetryToTheEndKilledBetweenPartsLosesNothingAndARepeatFinishesIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "frontier-kill"
	db, store, ids, c, open := retrierBehindOpenKilled(ctx, t, ref)
	mine := createWithin(ctx, t, store, ref, 99)
	_, err := settleTask(ctx, store, c, open, true, false)
	require.NoError(t, err)
	delivered := append([]int64{open.ID}, deliverAll(ctx, t, db, store, ref)...)
	require.Equal(t, append([]int64{open.ID}, ids[:4]...), delivered, "up to the held frontier")
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, nil)
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids[5:], Placement: exactlyonce.RetryAtEnd, Head: ids[4]}, got,
		"the repeat retries the rest after the frontier and releases it")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
	delivered = append(delivered, deliverAll(ctx, t, db, store, ref)...)
	require.Equal(t, append(append([]int64{open.ID}, ids...), mine.ID), delivered, "every task once, in order")
}

// Invariant: a retry to the end behind an open task whose process was SIGKILLed between parts, and
// which nobody repeats, jams nothing: once its frontier's hold ends the reference goes on (the
// first part's tasks, then a create made after the kill), the failed tasks not retried stay failed,
// each once, and a later retry sends them to the end, behind the create.
func TestARetryToTheEndKilledBetweenPartsWhoseHoldEndsJamsNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ref = "frontier-kill-expired"
	db, store, ids, c, open := retrierBehindOpenKilled(ctx, t, ref)
	mine := createWithin(ctx, t, store, ref, 99)
	_, err := settleTask(ctx, store, c, open, true, false)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "UPDATE events SET next_attempt_at = NOW(6) - INTERVAL 1 SECOND WHERE id = ?", ids[4]) // the hold ends
	require.NoError(t, err)
	delivered := append([]int64{open.ID}, deliverAll(ctx, t, db, store, ref)...)
	require.Equal(t, append(append([]int64{open.ID}, ids[:5]...), mine.ID), delivered, "the reference went on")
	for _, s := range statesOf(ctx, t, db, ref) {
		if slices.Contains(ids[5:], s[0]) {
			require.Equal(t, int64(exactlyonce.Failed), s[1], "task %d still failed", s[0])
		}
	}
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, nil)
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids[5:], Placement: exactlyonce.RetryAtEnd, Head: ids[5]}, got)
	delivered = append(delivered, deliverAll(ctx, t, db, store, ref)...)
	require.Equal(t, append(append(append([]int64{open.ID}, ids[:5]...), mine.ID), ids[5:]...), delivered, "every task once")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
}
