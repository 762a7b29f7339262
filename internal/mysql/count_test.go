package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// rowsScanned returns the rows the session has read by table scans so far (Handler_read_rnd_next;
// without an index every read is one). The pool must have one connection, so that the statements
// measured run in the session this reads.
func rowsScanned(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	require.NoError(t, db.QueryRow("SHOW SESSION STATUS LIKE 'Handler_read_rnd_next'").Scan(&name, &n))
	return n
}

// scannedBy returns the rows one call of f scans, in the one session of db.
func scannedBy(t *testing.T, db *sql.DB, f func()) int64 {
	t.Helper()
	before := rowsScanned(t, db)
	f()
	return rowsScanned(t, db) - before
}

// GET /events must cost the same whatever the history: counting 20,000 events reads no more rows
// than counting none (before migration 0005 it scanned every event, so it read 20,000 more).
func TestCountCostIsIndependentOfHistory(t *testing.T) {
	t.Parallel()
	db, _ := testdb.DB(t, 2) // Migrate needs two connections
	db.SetMaxOpenConns(1)    // then one session, whose counters rowsScanned reads
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)
	ctx := context.Background()

	count := func() int64 {
		n, err := store.Count(ctx)
		require.NoError(t, err)
		return n
	}
	var n int64
	empty := scannedBy(t, db, func() { n = count() })
	require.Zero(t, n)

	const history = 20_000
	_, err = mysql.LoadProcessed(ctx, db, history, nil)
	require.NoError(t, err)
	full := scannedBy(t, db, func() { n = count() })
	require.Equal(t, int64(history), n, "the seed helper keeps the count right")
	require.LessOrEqual(t, full, empty+2, "rows a count reads with %d events (%d) against none (%d)", history, full, empty)
}

// Every create is counted exactly once, and only if it committed: creates through both allocators,
// single and in batches, and in the caller's transactions (Store.InTx), some of which roll back,
// all racing. The count then equals the rows the table holds.
func TestCountIsExactUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	for _, allocator := range []string{mysql.AllocatorBlock, mysql.AllocatorLiteral} {
		t.Run(allocator, func(t *testing.T) {
			t.Parallel()
			db, _ := testdb.DB(t, 24)
			ctx := context.Background()
			// Two processes on one database, as two Lambda environments or containers would be.
			stores := make([]*mysql.Store, 2)
			for i := range stores {
				s, err := mysql.NewStore(db, mysql.StoreConfig{Allocator: allocator, BlockSize: 16})
				require.NoError(t, err)
				stores[i] = s
			}
			errRollBack := errors.New("the caller's transaction fails")
			var committed atomic.Int64
			const clients, each = 16, 12
			together(t, clients, func(w int) error {
				store := stores[w%len(stores)]
				for i := range each {
					switch (w + i) % 5 {
					case 0:
						if _, err := store.CreateProcessed(ctx, fmt.Sprintf("w%d-%d", w, i)); err != nil {
							return err
						}
						committed.Add(1)
					case 1:
						n := 1 + (w+i)%7
						if _, err := store.CreatePendingBatch(ctx, n); err != nil {
							return err
						}
						committed.Add(int64(n))
					case 2, 3:
						// Two creates in the caller's transaction; one transaction in two rolls back.
						rollBack := (w+i)%5 == 3
						err := store.InTx(ctx, func(ctx context.Context, tx *mysql.Tx) error {
							if _, err := tx.CreatePending(ctx, 2); err != nil {
								return err
							}
							if _, err := tx.CreateProcessed(ctx, "in-tx"); err != nil {
								return err
							}
							if rollBack {
								return errRollBack
							}
							return nil
						})
						if rollBack {
							if !errors.Is(err, errRollBack) {
								return fmt.Errorf("want the caller's error, got %v", err)
							}
							continue
						}
						if err != nil {
							return err
						}
						committed.Add(3)
					case 4:
						if _, err := store.CreatePending(ctx); err != nil {
							return err
						}
						committed.Add(1)
					}
				}
				return nil
			})
			var rows int64
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM events").Scan(&rows))
			n, err := stores[0].Count(ctx)
			require.NoError(t, err)
			require.Equal(t, committed.Load(), rows, "rows stored")
			require.Equal(t, rows, n, "the count equals the rows")
		})
	}
}

// A reader sees every create committed before its read began, on any connection of any process:
// clients on one pool create while readers on another count, and no count is below the creates
// already answered when it started.
func TestCountSeesEveryCommittedCreate(t *testing.T) {
	t.Parallel()
	db, dsn := testdb.DB(t, 8)
	writer, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)
	other, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	reader, err := mysql.NewStore(other, mysql.StoreConfig{})
	require.NoError(t, err)
	ctx := context.Background()

	var answered atomic.Int64
	const writers, readers, each = 6, 4, 40
	together(t, writers+readers, func(w int) error {
		if w < writers {
			for range each {
				if _, err := writer.CreateProcessed(ctx, "seen"); err != nil {
					return err
				}
				answered.Add(1)
				// The creator itself, on another pool, reads its own create.
				before := answered.Load()
				n, err := reader.Count(ctx)
				if err != nil {
					return err
				}
				if n < before {
					return fmt.Errorf("a count of %d after %d creates were answered", n, before)
				}
			}
			return nil
		}
		for range each {
			before := answered.Load()
			n, err := reader.Count(ctx)
			if err != nil {
				return err
			}
			if n < before {
				return fmt.Errorf("a count of %d after %d creates were answered", n, before)
			}
		}
		return nil
	})
	n, err := reader.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(writers*each), n)
}

// A create that fails leaves nothing behind: not its event, not its count, and not an open
// transaction on the connection it used, which the next create on that connection would otherwise
// run inside (and which would keep its rows invisible to everyone else).
func TestFailedCreateLeavesNoOpenTransaction(t *testing.T) {
	t.Parallel()
	db, dsn := testdb.DB(t, 2)
	db.SetMaxOpenConns(1) // one connection: the next create reuses the failed one's
	ctx := context.Background()
	other, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	for _, allocator := range []string{mysql.AllocatorBlock, mysql.AllocatorLiteral} {
		store, err := mysql.NewStore(db, mysql.StoreConfig{Allocator: allocator})
		require.NoError(t, err)
		// A value longer than the column: the INSERT fails after the transaction began.
		_, err = store.CreateProcessed(ctx, strings.Repeat("x", 300))
		require.Error(t, err, allocator)
		_, err = store.CreateProcessed(ctx, "after-"+allocator)
		require.NoError(t, err, allocator)
	}
	var rows, n int64
	require.NoError(t, other.QueryRow("SELECT COUNT(*) FROM events").Scan(&rows))
	reader, err := mysql.NewStore(other, mysql.StoreConfig{})
	require.NoError(t, err)
	n, err = reader.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), rows, "the two good creates, committed and visible to another session")
	require.Equal(t, int64(2), n)
}

// insertUncounted inserts n pending events the way the code before migration 0005 did: without
// counting them.
func insertUncounted(t *testing.T, db *sql.DB, firstID int64, n int) {
	t.Helper()
	for i := range n {
		_, err := db.Exec("INSERT INTO events (id, value, state, created_at) VALUES (?, NULL, 0, NOW(6))", firstID+int64(i))
		require.NoError(t, err)
	}
}

// rerunCountMigration makes Migrate apply migration 0005 (and any later one) again, as after a
// failure: their statements are written to be run again.
func rerunCountMigration(t *testing.T, ctx context.Context, db *sql.DB) {
	t.Helper()
	_, err := db.ExecContext(ctx, "DELETE FROM schema_migrations WHERE version >= 5")
	require.NoError(t, err)
	require.NoError(t, mysql.Migrate(ctx, db))
}

func requireExactCount(t *testing.T, ctx context.Context, db *sql.DB, store *mysql.Store) int64 {
	t.Helper()
	var rows int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&rows))
	n, err := store.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, rows, n, "the count equals the events stored")
	return n
}

// Migration 0005 counts the events that exist when it runs (stored by the code before it, which
// counted nothing), creates the 32 slots once however often it runs, and run again it adds exactly
// the events stored without a count since: the way to repair the count after old code wrote during
// an upgrade.
func TestCountMigrationCountsExistingEvents(t *testing.T) {
	t.Parallel()
	db, _ := testdb.DB(t, 4)
	ctx := context.Background()
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)

	// A database from before 0005, with history.
	_, err = db.ExecContext(ctx, "DROP TABLE event_counts")
	require.NoError(t, err)
	insertUncounted(t, db, 1_000_000, 25)
	rerunCountMigration(t, ctx, db)
	require.Equal(t, int64(25), requireExactCount(t, ctx, db, store))

	var slots, distinct, lo, hi int64
	require.NoError(t, db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT slot), MIN(slot), MAX(slot) FROM event_counts").
		Scan(&slots, &distinct, &lo, &hi))
	require.Equal(t, []int64{32, 32, 0, 31}, []int64{slots, distinct, lo, hi}, "slots 0..31, each once")

	// The new code counts; old code still writing does not; rerunning the migration repairs it, and
	// rerunning it with nothing missing changes nothing.
	_, err = store.CreateProcessed(ctx, "new")
	require.NoError(t, err)
	insertUncounted(t, db, 2_000_000, 5)
	rerunCountMigration(t, ctx, db)
	require.Equal(t, int64(31), requireExactCount(t, ctx, db, store))
	rerunCountMigration(t, ctx, db)
	require.Equal(t, int64(31), requireExactCount(t, ctx, db, store))
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM event_counts").Scan(&slots))
	require.Equal(t, int64(32), slots, "no slot added twice")
}

// The migration's recount takes no lock that writers wait on for the scan, and creates that commit
// while it runs are counted once: run it ten times over 30,000 events while 8 clients create.
func TestCountMigrationIsExactWhileCreatesRun(t *testing.T) {
	t.Parallel()
	db, _ := testdb.DB(t, 16)
	ctx := context.Background()
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)
	// History makes each recount's scan long enough for creates to commit during it.
	_, err = mysql.LoadProcessed(ctx, db, 30_000, nil)
	require.NoError(t, err)
	insertUncounted(t, db, 10_000_000, 7)

	stop := make(chan struct{})
	var reruns atomic.Int64
	together(t, 9, func(w int) error {
		if w == 0 {
			defer close(stop)
			for range 10 {
				if _, err := db.ExecContext(ctx, "DELETE FROM schema_migrations WHERE version >= 5"); err != nil {
					return err
				}
				if err := mysql.Migrate(ctx, db); err != nil {
					return err
				}
				reruns.Add(1)
			}
			return nil
		}
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			if _, err := store.CreatePendingBatch(ctx, 1+w%3); err != nil {
				return err
			}
		}
	})
	require.Equal(t, int64(10), reruns.Load())
	requireExactCount(t, ctx, db, store)
}

// Concurrent creates of one process are written in groups; a caller that goes away while its
// create waits, or while its group is written, gets its context's error and fails no one else.
// Every create answered with an id is stored and counted, and the count stays exact.
func TestGroupedCreatesSurviveCallersThatGoAway(t *testing.T) {
	t.Parallel()
	db, _ := testdb.DB(t, 8)
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)
	ctx := context.Background()

	var (
		mu     sync.Mutex
		stored []int64
		gone   atomic.Int64
	)
	const clients, each = 32, 30
	together(t, clients, func(w int) error {
		for i := range each {
			cctx, cancel := context.WithCancel(ctx)
			if (w+i)%4 == 0 {
				// Gone soon: before its group is taken, while it is written, or after.
				go func() {
					time.Sleep(time.Duration((w*i*37)%4000) * time.Microsecond)
					cancel()
				}()
			}
			var ids []int64
			var err error
			if w%2 == 0 {
				var e exactlyonce.Event
				e, err = store.CreateProcessed(cctx, fmt.Sprintf("g%d-%d", w, i))
				ids = []int64{e.ID}
			} else {
				ids, err = store.CreatePendingBatch(cctx, 1+i%3)
			}
			cancel()
			switch {
			case err == nil:
				mu.Lock()
				stored = append(stored, ids...)
				mu.Unlock()
			case errors.Is(err, context.Canceled) || cctx.Err() != nil:
				gone.Add(1)
			default:
				return fmt.Errorf("client %d create %d: %w", w, i, err)
			}
		}
		return nil
	})
	t.Logf("%d creates stored, %d callers went away", len(stored), gone.Load())
	for _, id := range stored {
		_, err := store.Get(ctx, id)
		require.NoError(t, err, "an id answered is stored")
	}
	requireExactCount(t, ctx, db, store)
}
