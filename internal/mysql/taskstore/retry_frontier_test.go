package taskstore_test

import (
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

// A reference's bulk retry to the end behind a task that is open now goes in parts too
// (retry_reference.go): the open task cannot be held, so the first part holds its frontier, the
// last task it placed (queued), which a settlement promotes pending with its hold kept and never
// leases; nothing behind it (the failed tasks not retried yet, whose places follow it, then a
// create between parts) is promoted until the last part releases it. These tests make a part 5
// failed tasks and act between the parts.

// openBehindFailed makes n failed tasks of ref and then one more, created after them and claimed
// (processing: open and started, so that a retry of the failed ones goes to the end behind it);
// it returns the database, its stores, the failed ids, and the open task with its claim.
func openBehindFailed(ctx context.Context, t *testing.T, ref string, n int) (*sql.DB, *wire.Stores, []int64, exactlyonce.Claim, exactlyonce.Event) {
	t.Helper()
	db, store, ids := failedReference(ctx, t, ref, n)
	open := createOne(ctx, t, store, ref, n)
	c, e := claimTask(ctx, t, store, open)
	return db, store, ids, c, e
}

// frontierCase is one test's reference of 12 failed tasks behind an open task (openBehindFailed)
// and the context it runs in (a minute).
type frontierCase struct {
	ref   string
	ctx   context.Context
	db    *sql.DB
	store *wire.Stores
	ids   []int64           // the failed tasks, in position order
	claim exactlyonce.Claim // the open task's claim
	open  exactlyonce.Event // the open task
}

func newFrontierCase(t *testing.T, ref string) frontierCase {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db, store, ids, c, open := openBehindFailed(ctx, t, ref, 12)
	return frontierCase{ref: ref, ctx: ctx, db: db, store: store, ids: ids, claim: c, open: open}
}

// firstPartAlone makes the store's retries go one part of 5 a call and makes the first call, which
// holds its frontier (ids[4]); it returns the call's answer for the test to check.
func (f frontierCase) firstPartAlone(t *testing.T) exactlyonce.RetriedReference {
	t.Helper()
	taskstore.RetryInParts(f.store.Tasks, 5, time.Nanosecond, nil) // one part a call
	got, err := f.store.Tasks.RetryReference(f.ctx, f.ref)
	require.NoError(t, err)
	return got
}

// deliverToTheFrontier delivers the open task and the first three retried tasks, each settlement
// handing the next on to the open task's claim (chain), and returns the fourth, leased to it: the
// task before the frontier.
func (f frontierCase) deliverToTheFrontier(t *testing.T) exactlyonce.Event {
	t.Helper()
	s, err := settleTask(f.ctx, f.store, f.claim, f.open, true, true)
	require.NoError(t, err)
	e := s.Next[0]
	for range 3 {
		s, err := settleTask(f.ctx, f.store, f.claim, e, true, true)
		require.NoError(t, err)
		e = s.Next[0]
	}
	require.Equal(t, f.ids[3], e.ID)
	return e
}

// holdFrontierRow locks the frontier's row (ids[4]) in a transaction of the test's, which the test
// commits to let go (rolled back at the test's end if it did not).
func (f frontierCase) holdFrontierRow(t *testing.T) *sql.Tx {
	t.Helper()
	tx, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = tx.ExecContext(f.ctx, "UPDATE events SET position = position WHERE id = ?", f.ids[4])
	require.NoError(t, err)
	return tx
}

// claimTask claims task id as a processor would (it must be due) and returns the claim and the task.
func claimTask(ctx context.Context, t *testing.T, store *wire.Stores, id int64) (exactlyonce.Claim, exactlyonce.Event) {
	t.Helper()
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
	claimed, err := store.Events.ClaimIDs(ctx, c, []int64{id}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, claimed.Leased, 1, "task %d claimable", id)
	return c, claimed.Leased[0]
}

// settleTask settles task e of claim c: delivered, or failed for good.
func settleTask(ctx context.Context, store *wire.Stores, c exactlyonce.Claim, e exactlyonce.Event, delivered, chain bool) (exactlyonce.TaskSettlement, error) {
	a := exactlyonce.Attempt{Number: e.Attempts + 1, Started: time.Now(), Status: 200}
	if !delivered {
		a.Status, a.Error = 500, "down"
	}
	return store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: e, Delivered: delivered, Final: !delivered, Attempt: a}}, chain)
}

// deliverAll delivers the due tasks of ref one after the other, as a processor would (a claim,
// then a settlement that hands the next task on to the same claim, chain), until none is due, and
// returns their ids in the order delivered.
func deliverAll(ctx context.Context, t *testing.T, db *sql.DB, store *wire.Stores, ref string) []int64 {
	t.Helper()
	var out []int64
	for {
		var id int64
		err := db.QueryRowContext(ctx, "SELECT id FROM events WHERE kind = 'task' AND reference_id = ? AND state = 0 AND (next_attempt_at IS NULL OR next_attempt_at <= NOW(6))", ref).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return out
		}
		require.NoError(t, err)
		c, e := claimTask(ctx, t, store, id)
		for {
			out = append(out, e.ID)
			s, err := settleTask(ctx, store, c, e, true, true)
			require.NoError(t, err)
			if len(s.Next) == 0 {
				break
			}
			e = s.Next[0]
		}
	}
}

// The retry of 12 failed tasks to the end behind a processing task, in three parts of 5. Between
// the first two, a create of the reference (queued, behind everything) and the open task's
// settlement (it promotes the first retried task); between the last two, the reference delivered
// as far as it can: the first part's tasks, stopping at its frontier (promoted, held, claimed by
// nothing), so the create is not delivered before the failed tasks not retried yet. Afterwards
// every task in order, the create last, each delivered once. With the settlement promoting the
// frontier as any queued task, the deliveries pass it and the test fails; before, the retry went
// whole (one part).
func TestARetryToTheEndBehindAnOpenTaskGoesInParts(t *testing.T) {
	t.Parallel()
	const ref = "frontier"
	f := newFrontierCase(t, ref)
	ctx, db, store, ids, c, open := f.ctx, f.db, f.store, f.ids, f.claim, f.open
	reads := taskstore.CountFailedSetReads(store.Tasks)
	var mine exactlyonce.CreatedTask
	var delivered []int64
	parts := 0
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		parts = n
		switch n {
		case 2:
			mine = createWithin(ctx, t, store, ref, 99)
			require.False(t, mine.Head, "a create between parts queues")
			_, err := settleTask(ctx, store, c, open, true, false) // promotes the first retried task
			require.NoError(t, err)
			delivered = append(delivered, open.ID)
		case 3:
			delivered = append(delivered, deliverAll(ctx, t, db, store, ref)...)
			require.Equal(t, append([]int64{open.ID}, ids[:4]...), delivered,
				"the open task, then the first part's tasks up to its frontier, which is held")
			require.False(t, claimable(ctx, t, store, ids[4]), "the frontier is held until the last part")
		}
		return nil
	})
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, 3, parts, "in parts")
	require.Equal(t, int64(1), reads(), "one read of the failed set for the call's three parts")
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Placement: exactlyonce.RetryAtEnd, Head: ids[4]}, got,
		"the last part releases the frontier, pending by then, and names it")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
	delivered = append(delivered, deliverAll(ctx, t, db, store, ref)...)
	require.Equal(t, append(append([]int64{open.ID}, ids...), mine.ID), delivered, "every task once, in order, the create last")
}

// The same retry whose frontier is still queued when the last part comes (nothing delivered
// between parts): the last part releases it queued and names no head (a queued task has no queue
// message); the open task's settlement then promotes the retried tasks in order, the create last.
func TestARetryToTheEndBehindAnOpenTaskReleasesAQueuedFrontier(t *testing.T) {
	t.Parallel()
	const ref = "frontier-queued"
	f := newFrontierCase(t, ref)
	ctx, db, store, ids, c, open := f.ctx, f.db, f.store, f.ids, f.claim, f.open
	reads := taskstore.CountFailedSetReads(store.Tasks)
	var mine exactlyonce.CreatedTask
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		if n == 2 {
			mine = createWithin(ctx, t, store, ref, 99)
		}
		return nil
	})
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids, Placement: exactlyonce.RetryAtEnd}, got)
	require.Equal(t, int64(1), reads(), "one read of the failed set for the call's three parts (the frontier read by id)")
	want := [][2]int64{{open.ID, processing}}
	for _, id := range ids {
		want = append(want, [2]int64{id, queued})
	}
	want = append(want, [2]int64{mine.ID, queued})
	require.Equal(t, want, statesOf(ctx, t, db, ref))
	s, err := settleTask(ctx, store, c, open, true, false)
	require.NoError(t, err)
	require.Empty(t, s.Next)
	require.Equal(t, append(ids, mine.ID), deliverAll(ctx, t, db, store, ref), "in order, the frontier released")
}

// Between two parts, the open task fails for good (a task that failed after the retry began): the
// call's parts place the failed tasks it read, in the places its first part took; the open task
// is not among them, and a later call retries it to the end, behind the create that came between
// parts. Every task delivered once, in position order.
func TestARetryToTheEndBehindAnOpenTaskThatFailsBetweenParts(t *testing.T) {
	t.Parallel()
	const ref = "frontier-fails"
	f := newFrontierCase(t, ref)
	ctx, db, store, ids, c, open := f.ctx, f.db, f.store, f.ids, f.claim, f.open
	var mine exactlyonce.CreatedTask
	taskstore.RetryInParts(store.Tasks, 5, time.Minute, func(n int) error {
		if n == 2 {
			mine = createWithin(ctx, t, store, ref, 99)
			_, err := settleTask(ctx, store, c, open, false, false)
			require.NoError(t, err)
		}
		return nil
	})
	got, err := store.Tasks.RetryReference(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, ids, got.IDs, "the failed tasks the call read")
	all, err := retryUntilDone(ctx, store, ref)
	require.NoError(t, err)
	require.Equal(t, []int64{open.ID}, all, "the open task, failed since, retried by the next call")
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
	require.Equal(t, append(append(ids, mine.ID), open.ID), deliverAll(ctx, t, db, store, ref),
		"the retried tasks, the create, then the task that failed since")
}

// A settlement that read the frontier's hold as ended (so it would hand the frontier on to its
// claim) while a part renews it, forced into that order: the test holds the frontier's row, the
// settlement of the task before it reads the queue and waits for that row in its promotion, the
// test renews the hold, as a part does, and commits. The promotion, which checks the hold on the
// row once locked, makes the frontier pending and held, and hands nothing on; the retry's next
// call continues it. Without that check the frontier is leased to the settling claim and the
// test fails.
func TestAHoldRenewedWhileASettlementPromotesKeepsTheFrontierFromItsClaim(t *testing.T) {
	t.Parallel()
	const ref = "frontier-renewed"
	f := newFrontierCase(t, ref)
	ctx, db, store, ids, c := f.ctx, f.db, f.store, f.ids, f.claim
	got := f.firstPartAlone(t)
	require.Equal(t, exactlyonce.RetriedReference{IDs: ids[:5], Placement: exactlyonce.RetryAtEnd, Head: 0, More: true}, got)
	// The open task and the first three retried tasks delivered; the fourth is leased to c.
	e := f.deliverToTheFrontier(t)
	_, err := db.ExecContext(ctx, "UPDATE events SET next_attempt_at = NOW(6) - INTERVAL 1 SECOND WHERE id = ?", ids[4]) // the hold ends
	require.NoError(t, err)
	tx := f.holdFrontierRow(t)
	done := make(chan struct{})
	var settled exactlyonce.TaskSettlement
	var settleErr error
	go func() {
		defer close(done)
		settled, settleErr = settleTask(ctx, store, c, e, true, true)
	}()
	awaitStatement(t, db, "UPDATE events SET state = 1", done) // its promotion waits for the frontier
	_, err = tx.ExecContext(ctx, "UPDATE events SET next_attempt_at = NOW(6) + INTERVAL 30 SECOND WHERE id = ?", ids[4])
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	<-done
	require.NoError(t, settleErr)
	require.Empty(t, settled.Next, "the frontier, held again, is not handed on")
	require.Equal(t, [][2]int64{{ids[4], pending}}, openOf(ctx, t, db, ref), "promoted, pending")
	require.False(t, claimable(ctx, t, store, ids[4]), "and held")
	all, err := retryUntilDone(ctx, store, ref)
	require.NoError(t, err)
	require.Equal(t, ids[5:], all)
	require.Equal(t, ids[4:], deliverAll(ctx, t, db, store, ref))
}

// openOf is a reference's open tasks: id and state.
func openOf(ctx context.Context, t *testing.T, db *sql.DB, ref string) [][2]int64 {
	t.Helper()
	var out [][2]int64
	for _, s := range statesOf(ctx, t, db, ref) {
		if s[1] < queued {
			out = append(out, s)
		}
	}
	return out
}

// Tasks that failed after a retry to the end behind an open task began take no place of the failed
// tasks it began with: one part a call; after the first, a create of the reference and the open
// task failed for good. The next calls read the failed set again (the open task among it, after the
// others by position): the tasks the retry began with fill the places its first part took, up to
// the create, and the open task, which does not fit there, is left failed, the retry ends (its
// frontier released: pending by then, as the tasks before it were delivered, and named as the
// call's head, whose queue message goes) and a fresh decision sends it to the end, behind the
// create. Each task has a position of its own; every task delivered once, in order. Placed with
// the others, the open task took the create's position.
func TestTasksThatFailedSinceARetryBeganTakeNoPlaceOfTheOthers(t *testing.T) {
	t.Parallel()
	const ref = "frontier-room"
	f := newFrontierCase(t, ref)
	ctx, db, store, ids, c, open := f.ctx, f.db, f.store, f.ids, f.claim, f.open
	require.Equal(t, ids[:5], f.firstPartAlone(t).IDs)
	mine := createWithin(ctx, t, store, ref, 99)
	_, err := settleTask(ctx, store, c, open, false, false)
	require.NoError(t, err)
	delivered := deliverAll(ctx, t, db, store, ref)
	require.Equal(t, ids[:4], delivered, "up to the frontier")
	var all []int64
	var heads []int64
	for {
		got, err := store.Tasks.RetryReference(ctx, ref)
		require.NoError(t, err)
		all = append(all, got.IDs...)
		if got.Head != 0 {
			heads = append(heads, got.Head)
		}
		if !got.More {
			break
		}
	}
	require.Equal(t, append(ids[5:], open.ID), all)
	require.Equal(t, []int64{ids[4]}, heads, "the frontier, released when the retry ended, named once")
	tasks := truth(ctx, t, db, ref)
	for i := 1; i < len(tasks); i++ {
		require.Greater(t, tasks[i][1], tasks[i-1][1], "task %d has a position of its own", tasks[i][0])
	}
	require.Equal(t, tasks, listed(ctx, t, store, ref))
	delivered = append(delivered, deliverAll(ctx, t, db, store, ref)...)
	require.Equal(t, append(append(ids, mine.ID), open.ID), delivered)
}

// A later part and the settlement that promotes the frontier, forced to meet at the frontier's
// row: the test holds the row, the settlement of the task before the frontier waits for it in its
// promotion and the next part waits for it after the bucket (LockFrontier); then the test lets go.
// Whichever gets the row first, the frontier ends pending and held, handed on to no claim, the
// part's tasks placed after it, and the rest delivered in order once the last part releases it.
func TestAPartAndASettlementMeetingAtTheFrontierKeepOrder(t *testing.T) {
	t.Parallel()
	const ref = "frontier-meet"
	f := newFrontierCase(t, ref)
	ctx, db, store, ids, c := f.ctx, f.db, f.store, f.ids, f.claim
	require.Equal(t, ids[:5], f.firstPartAlone(t).IDs)
	e := f.deliverToTheFrontier(t)
	tx := f.holdFrontierRow(t)
	settled, parted := make(chan struct{}), make(chan struct{})
	var settlement exactlyonce.TaskSettlement
	var part exactlyonce.RetriedReference
	var settleErr, partErr error
	go func() {
		defer close(settled)
		settlement, settleErr = settleTask(ctx, store, c, e, true, true)
	}()
	awaitStatement(t, db, "UPDATE events SET state = 0, worker_id", settled)
	go func() {
		defer close(parted)
		part, partErr = store.Tasks.RetryReference(ctx, ref)
	}()
	awaitStatement(t, db, "UPDATE events SET position = position WHERE state IN (0, 2)", parted)
	require.NoError(t, tx.Commit())
	<-settled
	<-parted
	require.NoError(t, settleErr)
	require.NoError(t, partErr)
	require.Empty(t, settlement.Next, "the frontier is not handed on")
	require.Equal(t, ids[5:10], part.IDs)
	require.Equal(t, [][2]int64{{ids[4], pending}}, openOf(ctx, t, db, ref))
	require.False(t, claimable(ctx, t, store, ids[4]), "held")
	all, err := retryUntilDone(ctx, store, ref)
	require.NoError(t, err)
	require.Equal(t, ids[10:], all)
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
	require.Equal(t, ids[4:], deliverAll(ctx, t, db, store, ref))
}
