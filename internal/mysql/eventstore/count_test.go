package eventstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The count is exact before, during and after folds, for every state an event can be in, and a
// folded event reads as it did before (processed stays processed, failed stays failed).
func TestCountIsExactAcrossFolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	db := store.DB.Pool()

	processed, err := store.Events.CreateProcessed(ctx, "v")
	require.NoError(t, err)
	for range 6 {
		_, err := store.Events.CreateProcessed(ctx, "v")
		require.NoError(t, err)
	}
	pending, err := store.Events.CreatePendingBatch(ctx, 5)
	require.NoError(t, err)
	// A failed event, as the claim path leaves one (state 20) with its reason.
	_, err = db.ExecContext(ctx, "INSERT INTO events (id, value, state, created_at, processed_at, last_error, attempts) "+
		"VALUES (1000000, NULL, 20, NOW(6), NOW(6), 'boom', 5)")
	require.NoError(t, err)
	const total = 7 + 5 + 1
	count := func() int64 {
		t.Helper()
		n, err := store.Events.Count(ctx)
		require.NoError(t, err)
		return n
	}
	require.EqualValues(t, total, count())

	moved, err := store.Events.FoldSettled(ctx, 3)
	require.NoError(t, err)
	require.EqualValues(t, 3, moved, "a fold moves at most its limit")
	require.EqualValues(t, total, count(), "after a partial fold")
	for {
		moved, err := store.Events.FoldSettled(ctx, 3)
		require.NoError(t, err)
		if moved == 0 {
			break
		}
		require.EqualValues(t, total, count(), "after each fold")
	}
	var counted, fresh int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT (SELECT n FROM settled_count), "+
		"(SELECT COUNT(*) FROM events WHERE state >= 10 AND state < 30)").Scan(&counted, &fresh))
	require.EqualValues(t, 8, counted, "every settled event was folded and counted once")
	require.Zero(t, fresh)

	// Folded events read as before.
	e, err := store.Events.Get(ctx, processed.ID)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, e.State)
	e, err = store.Events.Get(ctx, 1000000)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Failed, e.State)
	require.Equal(t, "boom", e.LastError)
	e, err = store.Events.Get(ctx, pending[0])
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, e.State)

	// A pending event settled after the fold is in `fresh`, counted by the scan, then folded.
	_, err = db.ExecContext(ctx, "UPDATE events SET state = 10, value = 'late' WHERE id = ?", pending[0])
	require.NoError(t, err)
	require.EqualValues(t, total, count())
	moved, err = store.Events.FoldSettled(ctx, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, moved)
	require.EqualValues(t, total, count())

	_, err = store.Events.FoldSettled(ctx, 0)
	require.Error(t, err, "a fold of nothing is a caller's mistake")
}

// Readers racing folders always see the exact count, and GET /overview an exact total: a fold's
// move out of `fresh` and its addition to settled_count are one transaction that holds the row's
// lock, and both reads read the row under a shared lock before they scan. One race, its ten readers
// taking the count and the overview in turn (two races took a minute each under -race), over 1,000
// events (3,000 took 39 s of the package's 48 under -race; with either lock taken out, 1,000 fail
// as surely, at the first 2 to 5 folds, 6 runs of 6, 999 of 1,000 read). The count fails with the
// two read in separate statements without the lock (2,986 of 3,000), and was seen to fail with both
// read in one snapshot, one statement or a REPEATABLE READ transaction (3,001-3,007 of 3,000 on
// MariaDB 10.11; on 2026-11-28 it passed that way at 3,000 and at 1,000 alike, twice each); the
// overview without its lock, a fold committing between its two reads, read 2,999 of 3,000.
func TestCountAndOverviewNeverSeeAFoldHalfway(t *testing.T) {
	t.Parallel()
	foldsRaceReaders(t, func(ctx context.Context, store *wire.Stores) (int64, error) {
		return store.Events.Count(ctx)
	}, func(ctx context.Context, store *wire.Stores) (int64, error) {
		o, err := store.Events.Overview(ctx)
		if err == nil && o.Processed != o.Total {
			return 0, fmt.Errorf("an overview during the folds read %d processed of %d events", o.Processed, o.Total)
		}
		return o.Total, err
	})
}

// foldsRaceReaders loads raceEvents processed events and folds them one per transaction from three
// folders while ten readers read the number of events, each with reads in turn: every read must be
// raceEvents.
func foldsRaceReaders(t *testing.T, reads ...func(context.Context, *wire.Stores) (int64, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 18))
	const events = raceEvents
	_, err := mysqltest.LoadProcessed(ctx, store.DB.Pool(), events, nil)
	require.NoError(t, err)

	var folded atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 3 { // folders, one event per transaction so that folds are many
		wg.Go(func() {
			for ctx.Err() == nil {
				n, err := store.Events.FoldSettled(ctx, 1)
				if err != nil {
					errs <- err
					return
				}
				if n == 0 {
					return
				}
				folded.Add(n)
			}
		})
	}
	var readsDone atomic.Int64
	var readers sync.WaitGroup
	done := make(chan struct{})
	for r := range 10 {
		readers.Go(func() {
			for i := r; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				n, err := reads[i%len(reads)](ctx, store)
				if err != nil {
					errs <- err
					return
				}
				if n != events {
					errs <- &countError{got: n}
					return
				}
				readsDone.Add(1)
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, events, folded.Load(), "every event was folded once")
	require.Greater(t, readsDone.Load(), int64(10), "the readers ran while the folds did")
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, events, n)
}

// raceEvents is the events foldsRaceReaders folds one a transaction.
const raceEvents = 1000

type countError struct{ got int64 }

func (e *countError) Error() string {
	return fmt.Sprintf("a count during the folds read %d events, not the %d there are", e.got, raceEvents)
}
