package taskstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// The directory's log (migrations/0018_reference_directory_log.sql): creates log their entries,
// and the compaction (the sweeper's, a retry's, the backfill's, and a create's every 256 positions
// of its bucket) moves them into the cells.

// logRows is how many rows the directory's log holds (migration 0018).
func logRows(ctx context.Context, t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reference_directory_log").Scan(&n))
	return n
}

// A create logs its tasks' entries and leaves the cells alone (an append to a cell reads the
// slot's whole row); the compaction moves them into the cells and empties the log; the listing
// reads the same before and after.
func TestCreatesLogTheirEntriesAndTheCompactionMovesThem(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 4)
	refs := append(taskstore.SameSlot("logged", 3), "elsewhere")
	var batch []exactlyonce.NewTask
	for i := range 5 {
		for _, ref := range refs {
			batch = append(batch, refTask(ref, i))
		}
	}
	_, err := store.Tasks.CreateTasks(ctx, batch)
	require.NoError(t, err)
	createOne(ctx, t, store, refs[0], 5)

	cells := func() int {
		var n int
		var cols []string
		for c := range 100 {
			cols = append(cols, fmt.Sprintf("LENGTH(d%d)", c))
		}
		require.NoError(t, db.QueryRowContext(ctx, "SELECT SUM("+strings.Join(cols, " + ")+") FROM reference_directory").Scan(&n))
		return n
	}
	require.Zero(t, cells(), "the creates wrote no cell")
	require.Positive(t, logRows(ctx, t, db))
	before := map[string][][2]int64{}
	for _, ref := range refs {
		before[ref] = listed(ctx, t, store, ref)
		require.Equal(t, truth(ctx, t, db, ref), before[ref], ref)
	}

	moved, err := store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Positive(t, moved)
	require.Zero(t, logRows(ctx, t, db))
	require.Equal(t, 24*len(batch)+24, cells(), "every entry in a cell, once")
	for _, ref := range refs {
		require.Equal(t, before[ref], listed(ctx, t, store, ref), ref)
	}
	moved, err = store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, moved, "nothing left to move")

	// A retry to the end of a task whose create's entry is still logged: the retry moves the log
	// into the cell before it appends the new position, so the compaction after it cannot put
	// the older entry last (the last entry of a task wins).
	a := createOne(ctx, t, store, "moved", 0)
	b := createOne(ctx, t, store, "moved", 1)
	_, err = db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE id = ?", a)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "UPDATE events SET state = 10, value = 'HTTP 200', processed_at = NOW(6) WHERE id = ?", b)
	require.NoError(t, err)
	placement, _, err := store.Tasks.RetryTask(ctx, a)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetryAtEnd, placement)
	_, err = store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, truth(ctx, t, db, "moved"), listed(ctx, t, store, "moved"))
	require.Equal(t, b, listed(ctx, t, store, "moved")[0][0], "the retried task after the delivered one")
}

// Listings race the compaction and more creates of the references of one slot: every listing holds
// each task whose create returned before it began, once, in position order.
func TestListingsRacingTheCompactionMissNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 12)
	refs := taskstore.SameSlot("listed", 4)
	var mu sync.Mutex
	created := map[string]map[int64]bool{}
	for _, ref := range refs {
		created[ref] = map[int64]bool{}
	}
	const creators, perCreator, listers, lists = 3, 30, 3, 40
	var done sync.WaitGroup
	done.Add(creators)
	together(t, creators+listers+1, func(w int) error {
		switch {
		case w < creators:
			defer done.Done()
			for i := range perCreator {
				ref := refs[(w+i)%len(refs)]
				got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(ref, 100*w+i)})
				if err != nil {
					return err
				}
				mu.Lock()
				created[ref][got[0].ID] = true
				mu.Unlock()
			}
		case w < creators+listers:
			for i := range lists {
				ref := refs[(w+i)%len(refs)]
				mu.Lock()
				want := maps.Clone(created[ref])
				mu.Unlock()
				got, err := store.Tasks.ReferenceTasks(ctx, ref, 0, 1000)
				if err != nil {
					return err
				}
				seen := map[int64]bool{}
				for j, e := range got {
					if seen[e.ID] {
						return fmt.Errorf("%s: task %d listed twice", ref, e.ID)
					}
					if j > 0 && e.Task.Position <= got[j-1].Task.Position {
						return fmt.Errorf("%s: positions out of order at task %d", ref, e.ID)
					}
					seen[e.ID] = true
				}
				for id := range want {
					if !seen[id] {
						return fmt.Errorf("%s: task %d was created before the listing began and is not in it", ref, id)
					}
				}
			}
		default:
			// Compact until the creates are done, and once more.
			finished := make(chan struct{})
			go func() { done.Wait(); close(finished) }()
			for {
				if _, err := store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute)); err != nil {
					return err
				}
				select {
				case <-finished:
					_, err := store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
					return err
				default:
				}
			}
		}
		return nil
	})
	require.Zero(t, logRows(ctx, t, db))
	for _, ref := range refs {
		require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref), ref)
	}
}

// One create of 200 tasks over 150 references appends their entries in more than one statement
// (at most 128 cells a statement): every reference lists its tasks, in order.
// A log larger than one statement carries (a cell's 500 entries, 12,000 bytes, against
// maxAppendBytes) is compacted in parts, every entry once, and the listing reads them all.
func TestTheCompactionOfALargeLogWritesEveryEntryOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 4)
	for round := range 5 {
		batch := make([]exactlyonce.NewTask, 100)
		for i := range batch {
			batch[i] = refTask("big", 100*round+i)
		}
		_, err := store.Tasks.CreateTasks(ctx, batch)
		require.NoError(t, err)
	}
	_, err := store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, logRows(ctx, t, db))
	want := requireDirectory(ctx, t, db, "big", 0)
	require.Len(t, want, 500)
	require.Equal(t, want, listed(ctx, t, store, "big"))
}

// A compaction cut off anywhere (by its context's deadline, at every statement in turn) rolls its
// bucket's transaction back whole: once one runs to its end, every entry is in its cell once, and
// the log is empty.
func TestACompactionCutOffAnywhereEndsWithEachEntryOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 8)
	refs := append(taskstore.SameSlot("cut", 3), "cut-elsewhere", "cut-again")
	cuts, whole := 0, 0
	for i := 0; whole < 3; i++ {
		if i%7 == 0 {
			// More to compact, now and then, so that cuts fall on logs of several sizes.
			for j, ref := range refs {
				createOne(ctx, t, store, ref, 10*i+j)
			}
		}
		// Deadlines from 0.2 ms to 20 ms, over and over, so that the cut falls on every
		// statement of a bucket's transaction in turn.
		short, stop := context.WithTimeout(ctx, time.Duration(200+(i*317)%20000)*time.Microsecond)
		_, err := store.Tasks.CompactDirectory(short, time.Now().Add(time.Minute))
		stop()
		if err != nil {
			require.Less(t, cuts, 5000, "the compaction keeps failing: %v", err)
			cuts++
			continue
		}
		if i > 40 && logRows(ctx, t, db) == 0 {
			whole++
		}
	}
	t.Logf("%d compactions cut off", cuts)
	require.Positive(t, cuts)
	for _, ref := range refs {
		requireDirectory(ctx, t, db, ref, 0)
	}
}

// A bucket's log stays bounded with no sweeper running: the create that passes every 256th
// position of its bucket compacts the bucket's slots in its transaction, so a retry's read of the
// log under the bucket scans at most that many tasks' entries however many were created.
func TestABucketsLogIsCompactedByItsCreatesEvery256Tasks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 4)
	refs := taskstore.SameSlot("busy", 3)
	for i := range 300 {
		createOne(ctx, t, store, refs[i%len(refs)], i)
	}
	require.Less(t, logRows(ctx, t, db), 256, "the log of one bucket after 300 creates of one task")
	for _, ref := range refs {
		want := requireDirectory(ctx, t, db, ref, 0)
		require.Len(t, want, 100)
		require.Equal(t, want, listed(ctx, t, store, ref), ref)
	}
}

// The create that takes a bucket's positions past a multiple of 256 compacts the bucket's four
// slots in three statements more than the create before it (one read of the four slots' log, one
// append to their cells, one delete), where a read, an append and a delete per slot made twelve:
// round trips under the buckets that every create of their references waits for. Each reference's
// directory then reads as `events` holds it, and the log is empty.
func TestACreatesCompactionOfABucketIsThreeStatements(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, dsn := testdb.DB(t, 4)
	db, tally := mysqltest.TalliedDB(t, dsn, 4, "")
	store := storesOn(t, db)
	var refs []string
	for _, slot := range taskstore.InEachSlotOfBucket("compacted", 2) {
		refs = append(refs, slot...)
	}
	// Positions 1 to 254 of the bucket: every reference's tasks logged in each of its slots.
	var batch []exactlyonce.NewTask
	for i := range 254 {
		batch = append(batch, refTask(refs[i%len(refs)], i))
		if len(batch) == 127 {
			_, err := store.Tasks.CreateTasks(ctx, batch)
			require.NoError(t, err)
			batch = nil
		}
	}
	logged := logRows(ctx, t, db)
	require.GreaterOrEqual(t, logged, 8, "log rows in each of the bucket's four slots")
	statementsOf := func(i int) int64 {
		before := tally.Statements()
		createOne(ctx, t, store, refs[i%len(refs)], i)
		return tally.Statements() - before
	}
	plain := statementsOf(254) // position 255
	require.Equal(t, logged+1, logRows(ctx, t, db), "no compaction before the mark")
	compacting := statementsOf(255) // position 256: the mark
	require.Zero(t, logRows(ctx, t, db), "the bucket's log compacted by the create that passed the mark")
	require.Equal(t, plain+3, compacting, "the compaction of the bucket's %d log rows in its four slots", logged+2)
	for _, ref := range refs {
		want := requireDirectory(ctx, t, db, ref, 0)
		require.Equal(t, want, listed(ctx, t, store, ref), ref)
	}
}

// A compaction rewrites each slot's row once when the slot's cells fit in one statement: InnoDB
// rewrites the whole row (its hundred cells) for every statement that changes it. The four slots
// of a bucket with 40 cells logged each, 160 cells, take two statements (128 cells at most each);
// taken column by column, each statement named the four rows, eight rewrites where four will do.
// The session's Handler_update counts a row of a partitioned table twice (the partitioning handler
// and InnoDB's).
func TestACompactionRewritesEachSlotsRowOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, dsn := testdb.DB(t, 1)
	db, tally := mysqltest.TalliedDB(t, dsn, 1, "") // one connection: the session's counters are the store's
	tally.Of = "UPDATE reference_directory SET"
	store := storesOn(t, db)
	var batch []exactlyonce.NewTask
	var refs []string
	for _, slot := range taskstore.InEachSlotOfBucket("rewritten", 40) {
		for _, ref := range slot {
			batch = append(batch, refTask(ref, 0))
			refs = append(refs, ref)
		}
	}
	_, err := store.Tasks.CreateTasks(ctx, batch)
	require.NoError(t, err)
	require.Equal(t, 160, logRows(ctx, t, db))
	updated := func() int64 {
		var name string
		var n int64
		require.NoError(t, db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_update'").Scan(&name, &n))
		return n
	}
	before, appends := updated(), tally.Matching()
	moved, err := store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, 160, moved)
	require.Equal(t, int64(2), tally.Matching()-appends, "160 cells in statements of at most 128")
	require.Equal(t, int64(2*4), updated()-before, "each of the four slots' rows rewritten once")
	require.Zero(t, logRows(ctx, t, db))
	for _, ref := range refs {
		want := requireDirectory(ctx, t, db, ref, 0)
		require.Equal(t, want, listed(ctx, t, store, ref), ref)
	}
}
