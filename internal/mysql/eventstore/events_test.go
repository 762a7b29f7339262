package eventstore_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func TestGetAndCount(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()

	created, err := store.Events.CreateProcessed(ctx, "hello")
	require.NoError(t, err)
	pendingID, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)

	got, err := store.Events.Get(ctx, created.ID)
	require.NoError(t, err)
	require.Equal(t, "hello", *got.Value)
	require.Equal(t, exactlyonce.Processed, got.State)
	require.Equal(t, exactlyonce.ByAPI, got.ProcessedBy)
	require.Equal(t, 1, got.ProcessCount)
	require.NotNil(t, got.ProcessedAt)
	require.WithinDuration(t, time.Now(), got.CreatedAt, time.Minute)

	pending, err := store.Events.Get(ctx, pendingID)
	require.NoError(t, err)
	require.Nil(t, pending.Value)
	require.Equal(t, exactlyonce.Pending, pending.State)
	require.Nil(t, pending.ProcessedAt)

	_, err = store.Events.Get(ctx, 1<<40)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err))

	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

func TestProcessIDsOutcomes(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()

	fresh, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	held, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	done, err := store.Events.CreateProcessed(ctx, "before")
	require.NoError(t, err)

	// Another worker holds `held`.
	tx, err := store.DB.Pool().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer tx.Rollback()
	var got int64
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT id FROM events WHERE id = ? FOR UPDATE", held).Scan(&got))

	ctxTimeout, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := processIDs(ctxTimeout, store, false, fresh, fresh, held, done.ID, 999999)
	require.NoError(t, err)
	require.Equal(t, map[int64]exactlyonce.Outcome{
		fresh:   exactlyonce.OutcomeSettled,
		held:    exactlyonce.OutcomeBusy,
		done.ID: exactlyonce.OutcomeAlreadySettled,
		999999:  exactlyonce.OutcomeMissing,
	}, out)

	e, err := store.Events.Get(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, fixedValue(fresh), *e.Value)
	require.Equal(t, exactlyonce.ByProcessor, e.ProcessedBy)
	require.Equal(t, 1, e.ProcessCount)
	e, err = store.Events.Get(ctx, done.ID)
	require.NoError(t, err)
	require.Equal(t, "before", *e.Value, "an already processed event is not written again")
	require.Equal(t, 1, e.ProcessCount)

	// Once the holder lets go, the held event can be processed, exactly once.
	require.NoError(t, tx.Rollback())
	out, err = processIDs(ctx, store, false, held, fresh)
	require.NoError(t, err)
	require.Equal(t, map[int64]exactlyonce.Outcome{held: exactlyonce.OutcomeSettled, fresh: exactlyonce.OutcomeAlreadySettled}, out)
}

// The server runs at its default REPEATABLE READ. A sweep must not wait for a row another worker
// holds: that only holds if the store runs its transactions at READ COMMITTED.
func TestSweepDoesNotWaitForRowsOthersHold(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	var isolation string
	require.NoError(t, store.DB.Pool().QueryRow("SELECT @@GLOBAL.tx_isolation").Scan(&isolation))
	t.Logf("server default isolation: %s", isolation)

	var ids []int64
	for range 20 {
		id, err := store.Events.CreatePending(ctx)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	tx, err := store.DB.Pool().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer tx.Rollback()
	var held int64
	require.NoError(t, tx.QueryRowContext(ctx,
		"SELECT id FROM events WHERE state = 0 AND id = ? FOR UPDATE", ids[7]).Scan(&held))

	// innodb_lock_wait_timeout is 50 s by default: waiting would blow this deadline.
	ctxTimeout, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := processDue(ctxTimeout, store, false, 0, 100)
	require.NoError(t, err)
	require.Equal(t, 19, n, "every pending event but the held one")
}

func TestProcessDueLeavesYoungEventsToTheQueue(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	_, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	n, err := processDue(ctx, store, false, time.Hour, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = processDue(ctx, store, false, 0, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// Sweepers and processors racing over the same pending events, through separate stores as separate
// processes would: every event ends processed, and processed once.
//
// Both processing paths race: the one-transaction path (inline work) and the lease path (claim and
// commit, work outside any transaction, settle under the lease's guard), and both together, half
// the workers taking each path over the same events.
func TestConcurrentClaimsProcessEachEventOnce(t *testing.T) {
	t.Parallel()
	for name, leased := range map[string]func(w int) bool{
		"inline": func(int) bool { return false },
		"leased": func(int) bool { return true },
		"mixed":  func(w int) bool { return w%4 >= 2 },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raceWorkers(t, leased)
		})
	}
}

func raceWorkers(t *testing.T, leased func(w int) bool) {
	db, _ := testdb.DB(t, 40)
	ctx := context.Background()
	setup, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	const total = 600
	var ids []int64
	for range total {
		id, err := setup.Events.CreatePending(ctx)
		require.NoError(t, err)
		ids = append(ids, id)
	}

	var (
		mu        sync.Mutex
		processed = map[int64]int{}
		deadlocks int64
	)
	storeOf := make([]*wire.Stores, 8)
	for w := range storeOf {
		store, err := wire.StoresOn(db, mysql.Config{})
		require.NoError(t, err)
		storeOf[w] = store
	}
	together(t, len(storeOf), func(w int) error { // 4 sweepers and 4 processors
		store := storeOf[w]
		defer func() { mu.Lock(); deadlocks += store.DB.Stats().Deadlocks; mu.Unlock() }()
		if w%2 == 0 { // a sweeper drains in batches of 25
			for {
				n, err := processDue(ctx, store, leased(w), 0, 25)
				if err != nil || n == 0 {
					return err
				}
			}
		}
		// a processor handles "messages" for every id, in batches of 10, in its own order
		for i := w * 10 % total; i < total+w*10%total; i += 10 {
			batch := make([]int64, 0, 10)
			for j := i; j < i+10; j++ {
				batch = append(batch, ids[j%total])
			}
			out, err := processIDs(ctx, store, leased(w), batch...)
			if err != nil {
				return err
			}
			mu.Lock()
			for id, o := range out {
				if o == exactlyonce.OutcomeSettled {
					processed[id]++
				}
			}
			mu.Unlock()
		}
		return nil
	})
	for id, n := range processed {
		require.Equal(t, 1, n, "event %d reported processed by %d processor calls", id, n)
	}
	var pending, wrong int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM events WHERE state < 10").Scan(&pending))
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM events WHERE process_count <> 1").Scan(&wrong))
	require.Zero(t, pending)
	require.Zero(t, wrong, "every event written exactly once")
	t.Logf("deadlocks retried: %d", deadlocks)
}
