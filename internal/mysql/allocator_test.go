package mysql_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The block allocator's refills race: tiny blocks, many processes, many clients each, and some
// clients whose requests are cancelled while they wait for a refill. Every id handed out is
// distinct and in the table once; a cancelled wait breaks nothing for the others; and the ids
// reserved but never used (the gaps) stay within one and a half blocks per process.
func TestBlockAllocatorRefillsRaceAcrossProcesses(t *testing.T) {
	t.Parallel()
	const (
		stores, clients, each = 6, 24, 30
		blockSize             = 8 // a refill every 4 ids per process, so clients wait on refills often
	)
	db, _ := testdb.DB(t, 60)
	ctx := context.Background()
	var (
		mu        sync.Mutex
		ids       = map[int64]int{}
		cancelled int
	)
	storeOf := make([]*wire.Stores, stores)
	for s := range storeOf {
		store, err := wire.StoresOn(db, mysql.Config{Allocator: mysql.AllocatorBlock, BlockSize: blockSize})
		require.NoError(t, err)
		storeOf[s] = store
	}
	together(t, stores*clients, func(w int) error {
		store, c := storeOf[w/clients], w%clients
		for i := range each {
			cctx, cancel := ctx, context.CancelFunc(func() {})
			if c%6 == 0 && i%3 == 0 {
				// Some requests give up almost at once, often while a refill is in flight.
				cctx, cancel = context.WithTimeout(ctx, time.Duration(i%4)*100*time.Microsecond)
			}
			id, err := store.Events.CreatePending(cctx)
			cancel()
			if err != nil {
				if cctx.Err() != nil {
					mu.Lock()
					cancelled++
					mu.Unlock()
					continue
				}
				return err
			}
			mu.Lock()
			ids[id]++
			mu.Unlock()
		}
		return nil
	})
	for id, n := range ids {
		require.Equal(t, 1, n, "id %d handed out %d times", id, n)
	}
	var rows, distinct, counter int64
	require.NoError(t, db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT id) FROM events").Scan(&rows, &distinct))
	require.NoError(t, db.QueryRow("SELECT id FROM status").Scan(&counter))
	require.Equal(t, rows, distinct, "no id stored twice")
	// A cancelled insert may have committed before its caller gave up: rows >= ids returned.
	require.GreaterOrEqual(t, rows, int64(len(ids)))
	require.LessOrEqual(t, rows, int64(len(ids)+cancelled))
	// Unused ids: at most the rest of the current block and the prefetched one, per process, plus
	// the ids of cancelled requests.
	require.LessOrEqual(t, counter-rows, int64(stores*(blockSize+blockSize/2+1)+cancelled),
		"counter %d, rows %d: too many ids reserved and never used", counter, rows)
	t.Logf("%d ids, %d cancelled requests, counter %d", len(ids), cancelled, counter)
}

// A process that creates rarely does not hand out ids from a block reserved long ago: a create
// after BlockMaxAge takes an id above every id the other processes took meanwhile. Before, the
// block was used for as long as the process lived (an API's Lambda execution environment: hours),
// each of its events a late event of a page the others had filled, packed and archived long before
// (docs/history.md, "Late events"). The block's unused ids are gaps, never duplicates.
func TestABlockOlderThanItsMaxAgeIsDroppedForAFreshOne(t *testing.T) {
	t.Parallel()
	const maxAge = time.Minute
	db, _ := testdb.DB(t, 8)
	ctx := context.Background()
	var (
		mu    sync.Mutex
		clock = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	pass := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }

	// Two processes: a rare creator, whose blocks age on the test's clock, and a busy one.
	rare, err := wire.StoresOn(db, mysql.Config{BlockMaxAge: maxAge})
	require.NoError(t, err)
	mysql.SetAllocatorClock(rare.DB, now)
	busy, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)

	first, err := rare.Events.CreatePending(ctx) // reserves a block
	require.NoError(t, err)
	var others int64
	for range 3 * mysql.DefaultBlockSize / 2 { // the busy process takes blocks above it, and uses them
		id, err := busy.Events.CreatePending(ctx)
		require.NoError(t, err)
		others = max(others, id)
	}
	require.Greater(t, others, first+mysql.DefaultBlockSize)

	pass(maxAge - time.Second)
	young, err := rare.Events.CreatePending(ctx)
	require.NoError(t, err)
	require.Equal(t, first+1, young, "a block younger than its max age is used")

	pass(2 * time.Second) // the block is now older than maxAge
	fresh, err := rare.Events.CreatePending(ctx)
	require.NoError(t, err)
	require.Greater(t, fresh, others, "a create after the block's max age takes an id above the other processes' (it took %d, after %d)", fresh, young)

	// And the fresh block is used in turn: the drop is of old blocks, not of every block.
	next, err := rare.Events.CreatePending(ctx)
	require.NoError(t, err)
	require.Equal(t, fresh+1, next)

	var rows, distinct int64
	require.NoError(t, db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT id) FROM events").Scan(&rows, &distinct))
	require.Equal(t, rows, distinct, "no id stored twice")
	require.Equal(t, int64(3*mysql.DefaultBlockSize/2+4), rows)
}
