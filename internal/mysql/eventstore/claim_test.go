package eventstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func claimFor(by string, lease time.Duration) exactlyonce.Claim {
	return exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: by, Lease: lease}
}

// lockNowait tries to lock event id from a transaction of its own without waiting, and says
// whether it could: a row lock held by anyone else makes it fail at once.
func lockNowait(t *testing.T, db *sql.DB, id int64) bool {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.Exec("SET SESSION innodb_lock_wait_timeout = 1")
	require.NoError(t, err)
	var got int64
	err = tx.QueryRow("SELECT id FROM events WHERE id = ? FOR UPDATE", id).Scan(&got)
	return err == nil
}

// The lease path holds no row lock while the work runs: the claim commits, the event is visibly
// `processing`, another transaction can lock its row at once, and the settlement then settles it
// once, recording the claim that settled it.
func TestLeasedWorkHoldsNoRowLockAndSettlesOnce(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	id, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)

	c := claimFor(exactlyonce.ByProcessor, time.Minute)
	got, err := store.Events.ClaimIDs(ctx, c, []int64{id}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Empty(t, got.Settled)
	require.Len(t, got.Leased, 1)
	require.Equal(t, id, got.Leased[0].ID)

	e, err := store.Events.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processing, e.State)
	require.Equal(t, "processing", e.State.String())
	require.True(t, lockNowait(t, store.DB.Pool(), id), "no row lock is held between claim and settlement")

	// While leased, nobody else claims it: not the processor, not the sweeper.
	other, err := store.Events.ClaimIDs(ctx, claimFor(exactlyonce.ByProcessor, time.Minute), []int64{id}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Zero(t, other.Count())
	due, err := store.Events.ClaimDue(ctx, claimFor(exactlyonce.BySweeper, time.Minute), 0, 10, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Zero(t, due.Count())
	out, err := store.Events.Outcomes(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeBusy, out[id])

	settled, err := store.Events.Settle(ctx, c.ID, c.By, map[int64]exactlyonce.Result{id: {Value: "done"}})
	require.NoError(t, err)
	require.Equal(t, []int64{id}, settled)
	settled, err = store.Events.Settle(ctx, c.ID, c.By, map[int64]exactlyonce.Result{id: {Value: "again"}})
	require.NoError(t, err)
	require.Empty(t, settled, "a second settlement of the same claim changes nothing")

	e, err = store.Events.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, e.State)
	require.Equal(t, "done", *e.Value)
	require.Equal(t, 1, e.ProcessCount)
	var claimID string
	require.NoError(t, store.DB.Pool().QueryRow("SELECT claim_id FROM events WHERE id = ?", id).Scan(&claimID))
	require.Equal(t, c.ID, claimID)
}

// A worker whose lease expired and was taken over cannot settle: the sweeper and a redelivered
// message both claim an event whose lease expired, and only the new holder's settlement counts.
func TestExpiredLeaseIsClaimedAgainAndTheOldHolderCannotSettle(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	a, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	b, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)

	old := claimFor(exactlyonce.ByProcessor, 200*time.Millisecond)
	got, err := store.Events.ClaimIDs(ctx, old, []int64{a, b}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, got.Leased, 2)

	// The old holder stalls past its lease; the sweeper takes the expired leases over.
	sweep := claimFor(exactlyonce.BySweeper, time.Minute)
	var taken exactlyonce.Claimed
	testutil.Eventually(t, 10*time.Second, "the sweeper claims the expired leases", func() bool {
		taken, err = store.Events.ClaimDue(ctx, sweep, time.Hour, 10, mysqltest.LeaseAll) // a long grace: only expired leases are due
		require.NoError(t, err)
		return taken.Count() == 2
	})

	settled, err := store.Events.Settle(ctx, old.ID, old.By, map[int64]exactlyonce.Result{a: {Value: "old"}, b: {Value: "old"}})
	require.NoError(t, err)
	require.Empty(t, settled, "the old holder's settlement is refused")
	require.NoError(t, store.Events.Release(ctx, old.ID, []int64{a, b}))
	e, err := store.Events.Get(ctx, a)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processing, e.State, "the old holder's release does not touch the new lease")
	// Nor does its failure: neither a final one (a failed for good) nor one that would wait (b).
	gaveUp, err := store.Events.Fail(ctx, old, map[int64]exactlyonce.Failure{
		a: {Final: true, Err: errors.New("old holder gave up")},
		b: {Wait: time.Hour, Err: errors.New("old holder failed")},
	})
	require.NoError(t, err)
	require.Empty(t, gaveUp, "the old holder's failure is refused")
	for _, id := range []int64{a, b} {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Processing, e.State, "the old holder's failure does not touch the new lease")
		require.Zero(t, e.Attempts, "the old holder's failure records no attempt")
	}

	settled, err = store.Events.Settle(ctx, sweep.ID, sweep.By, map[int64]exactlyonce.Result{a: {Value: "new"}, b: {Value: "new"}})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{a, b}, settled)
	for _, id := range []int64{a, b} {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "new", *e.Value)
		require.Equal(t, exactlyonce.BySweeper, e.ProcessedBy)
		require.Equal(t, 1, e.ProcessCount)
	}
}

// A redelivered message claims an event whose lease expired, too.
func TestRedeliveredMessageClaimsAnExpiredLease(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	id, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	_, err = store.Events.ClaimIDs(ctx, claimFor(exactlyonce.ByProcessor, 100*time.Millisecond), []int64{id}, mysqltest.LeaseAll)
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, "the message's retry settles the event", func() bool {
		out, err := processIDs(ctx, store, false, id)
		require.NoError(t, err)
		return out[id] == exactlyonce.OutcomeSettled
	})
}

// Work that fails releases its events: pending again, claimable at once, nothing settled.
func TestFailedWorkReleasesTheEvent(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	id, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	c := claimFor(exactlyonce.ByProcessor, time.Hour)
	_, err = store.Events.ClaimIDs(ctx, c, []int64{id}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.NoError(t, store.Events.Release(ctx, c.ID, []int64{id}))
	e, err := store.Events.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, e.State)
	out, err := processIDs(ctx, store, true, id)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeSettled, out[id])
}

// Events created in a caller's transaction commit with what else it writes, or not at all: the
// allocator hands out ids and the caller's transaction inserts the rows.
func TestEventsCreatedInATransactionCommitOrRollBackWithIt(t *testing.T) {
	t.Parallel()
	for _, alloc := range []string{mysql.AllocatorBlock, mysql.AllocatorLiteral} {
		t.Run(alloc, func(t *testing.T) {
			t.Parallel()
			store := wire.NewStores(testdb.Core(t, mysql.Config{Allocator: alloc}, 4))
			ctx := context.Background()
			boom := errors.New("the caller's other write failed")
			var lost []int64
			err := store.Events.InTx(ctx, func(ctx context.Context, tx *eventstore.Tx) error {
				ids, err := tx.CreatePending(ctx, 3)
				if err != nil {
					return err
				}
				lost = ids
				return boom
			})
			require.ErrorIs(t, err, boom)
			for _, id := range lost {
				_, err := store.Events.Get(ctx, id)
				require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "event %d rolled back with its transaction", id)
			}

			var kept []int64
			var sync exactlyonce.Event
			require.NoError(t, store.Events.InTx(ctx, func(ctx context.Context, tx *eventstore.Tx) error {
				ids, err := tx.CreatePending(ctx, 2)
				if err != nil {
					return err
				}
				kept = ids
				sync, err = tx.CreateProcessed(ctx, "together")
				return err
			}))
			for _, id := range append(kept, sync.ID) {
				_, err := store.Events.Get(ctx, id)
				require.NoError(t, err)
			}
			n, err := store.Events.Count(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 3, n)
		})
	}
}

// Every settled event gets its own value, on both paths, across more than one settling statement
// (MarkChunk ids each): the one-transaction path writes the values its decisions gave, the lease
// path those its settlement names.
func TestEachSettledEventGetsItsOwnValue(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	n := 2*eventstore.MarkChunk + 50
	_, err := mysqltest.LoadPending(ctx, store.DB.Pool(), int64(2*n), nil)
	require.NoError(t, err)
	valueOf := func(id int64) string { return fmt.Sprintf("value-of-%d", id) }

	// The one-transaction path: the decisions settle each event with its value.
	settle := func(_ context.Context, evs []exactlyonce.Event) []exactlyonce.Decision {
		out := make([]exactlyonce.Decision, len(evs))
		for i, ev := range evs {
			out[i] = exactlyonce.Decision{Action: exactlyonce.Settle, Value: valueOf(ev.ID)}
		}
		return out
	}
	inline, err := store.Events.ClaimDue(ctx, claimFor(exactlyonce.BySweeper, time.Minute), 0, n, settle)
	require.NoError(t, err)
	require.Len(t, inline.Settled, n)

	// The lease path: leased, then settled with each event's value.
	c := claimFor(exactlyonce.BySweeper, time.Minute)
	leased, err := store.Events.ClaimDue(ctx, c, 0, n, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, leased.Leased, n)
	results := map[int64]exactlyonce.Result{}
	for _, ev := range leased.Leased {
		results[ev.ID] = exactlyonce.Result{Value: valueOf(ev.ID)}
	}
	settled, err := store.Events.Settle(ctx, c.ID, c.By, results)
	require.NoError(t, err)
	require.Len(t, settled, n)

	for _, id := range append(inline.Settled, settled...) {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, e.Value, "event %d", id)
		require.Equal(t, valueOf(id), *e.Value, "event %d", id)
	}
}

// A claim holds at most MaxClaimTasks tasks, whose payloads it reads whole into memory (128 of the
// largest payload the API accepts: 32 MiB, in a 256 MB Lambda), whatever its limit of rows; the
// plain events due beside them are claimed up to the limit, and the tasks left out stay pending
// for the next claim, which takes them.
func TestAClaimHoldsAtMostMaxClaimTasksTasks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	createTasks(ctx, t, store, eventstore.MaxClaimTasks+40)
	_, err := store.Events.CreatePendingBatch(ctx, 30)
	require.NoError(t, err)

	got, err := store.Events.ClaimDue(ctx, claimFor(exactlyonce.BySweeper, time.Minute), 0, 500, mysqltest.LeaseAll)
	require.NoError(t, err)
	count := func(c exactlyonce.Claimed) (tasks, plain int) {
		for _, ev := range c.Leased {
			if ev.Kind == exactlyonce.KindTask {
				tasks++
			} else {
				plain++
			}
		}
		return tasks, plain
	}
	gotTasks, gotPlain := count(got)
	require.Equal(t, eventstore.MaxClaimTasks, gotTasks, "tasks in one claim")
	require.Equal(t, 30, gotPlain, "the plain events due beside them")
	next, err := store.Events.ClaimDue(ctx, claimFor(exactlyonce.BySweeper, time.Minute), 0, 500, mysqltest.LeaseAll)
	require.NoError(t, err)
	gotTasks, gotPlain = count(next)
	require.Equal(t, 40, gotTasks, "the tasks the first claim left out")
	require.Zero(t, gotPlain)
}

// A claim of named events (the processor's, for its messages' ids) holds at most MaxClaimTasks
// tasks too. A message names up to 100 events and a batch holds 10 messages, and the local runner's
// outbox names up to 100 heads in a message, so a batch could name 1,000 tasks, whose payloads of
// up to 256 KiB the claim read whole into memory (250 MiB, in each of the local runner's four
// pollers): ClaimIDs took every one. Now it leases the first MaxClaimTasks and leaves the others
// pending (LeftOut), for the next claim, whatever names them; the plain events are all claimed.
func TestAClaimOfNamedEventsHoldsAtMostMaxClaimTasksTasks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ids := createTasks(ctx, t, store, eventstore.MaxClaimTasks+40)
	plain, err := store.Events.CreatePendingBatch(ctx, 30)
	require.NoError(t, err)
	ids = append(ids, plain...)

	got, err := store.Events.ClaimIDs(ctx, claimFor(exactlyonce.ByProcessor, time.Minute), ids, mysqltest.LeaseAll)
	require.NoError(t, err)
	gotTasks, gotPlain := 0, 0
	for _, ev := range got.Leased {
		if ev.Kind == exactlyonce.KindTask {
			gotTasks++
		} else {
			gotPlain++
		}
	}
	require.Equal(t, eventstore.MaxClaimTasks, gotTasks, "tasks in one claim")
	require.Equal(t, 30, gotPlain, "the plain events named beside them")
	require.Len(t, got.LeftOut, 40, "the tasks left out, pending")
	for _, id := range got.LeftOut {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Pending, e.State, "task %d left out, not leased", id)
	}
	next, err := store.Events.ClaimIDs(ctx, claimFor(exactlyonce.ByProcessor, time.Minute), got.LeftOut, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, next.Leased, 40, "the next claim takes the tasks the first left out")
	require.Empty(t, next.LeftOut)
}

// createTasks creates n tasks without a reference, 100 a call, and returns their ids.
func createTasks(ctx context.Context, t *testing.T, store *wire.Stores, n int) []int64 {
	t.Helper()
	var ids []int64
	for len(ids) < n {
		batch := make([]exactlyonce.NewTask, min(100, n-len(ids)))
		for i := range batch {
			batch[i] = exactlyonce.NewTask{URL: "https://example.com/hook", Payload: []byte(`{"n":1}`), MaxRetries: 3}
		}
		created, err := store.Tasks.CreateTasks(ctx, batch)
		require.NoError(t, err)
		for _, c := range created {
			ids = append(ids, c.ID)
		}
	}
	return ids
}
