package taskstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The reference directory (directory.go): a reference's listing and a manual retry read
// the reference's own tasks, by id, not the history.

// createOne creates one task of ref and returns its id.
func createOne(ctx context.Context, t *testing.T, store *wire.Stores, ref string, i int) int64 {
	t.Helper()
	got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(ref, i)})
	require.NoError(t, err)
	return got[0].ID
}

// truth is a reference's tasks as `events` holds them, in position order: id and position.
func truth(ctx context.Context, t *testing.T, db *sql.DB, ref string) [][2]int64 {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT id, position FROM events WHERE kind = 'task' AND reference_id = ? ORDER BY position", ref)
	require.NoError(t, err)
	defer rows.Close()
	var out [][2]int64
	for rows.Next() {
		var e [2]int64
		require.NoError(t, rows.Scan(&e[0], &e[1]))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

// listed is a reference's listing (ReferenceTasks) as id and position, read in pages of 7.
func listed(ctx context.Context, t *testing.T, store *wire.Stores, ref string) [][2]int64 {
	t.Helper()
	var out [][2]int64
	var after int64
	for {
		got, err := store.Tasks.ReferenceTasks(ctx, ref, after, 7)
		require.NoError(t, err)
		for _, e := range got {
			out = append(out, [2]int64{e.ID, e.Task.Position})
		}
		if len(got) < 7 {
			return out
		}
		after = got[len(got)-1].ID
	}
}

// requireDirectory checks ref's directory (its cell and its log) against `events`: its entries are
// the reference's tasks in position order, each task's entries once but extra more (a retry to the
// end adds one). It returns the tasks, as truth does.
func requireDirectory(ctx context.Context, t *testing.T, db *sql.DB, ref string, extra int) [][2]int64 {
	t.Helper()
	want := truth(ctx, t, db, ref)
	entries, raw, err := taskstore.DirectoryEntries(ctx, db, ref)
	require.NoError(t, err)
	require.Equal(t, want, entries, ref)
	require.Equal(t, len(want)+extra, raw, "%s: one entry per task, and %d more (a retry to the end's new position)", ref, extra)
	return want
}

// poisonHistory adds a page row far from every event whose first column holds ref's bytes (what
// the scan of the packed history looks for) and is no page at all: a read that scans the packed
// history for ref's tasks fails on it, one that reads ref's own tasks never sees it.
func poisonHistory(ctx context.Context, t *testing.T, db *sql.DB, ref string) {
	t.Helper()
	cols := make([]string, pages.Columns)
	args := []any{int64(1 << 30), 1}
	for c := range cols {
		cols[c] = fmt.Sprintf("c%d", c)
		args = append(args, []byte{})
	}
	args[2] = append(pages.ReferenceNeedle(ref, taskstore.ReferenceHash(ref)), "not a page"...)
	_, err := db.ExecContext(ctx, fmt.Sprintf("INSERT INTO event_pages (page, events, %s) VALUES (%s)",
		strings.Join(cols, ", "), mysql.Placeholders(len(args))), args...)
	require.NoError(t, err)
}

// A reference's listing, a retry of one of its tasks and a retry of the reference read the
// reference's tasks and nothing else of the packed history: with a page row that holds the
// reference's bytes and cannot be decoded, they answer as they should (the scans they made before,
// ReferenceTasksScan, fail on it).
func TestAReferenceReadsItsOwnTasksNotTheHistory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 8)
	ids := []int64{createOne(ctx, t, store, "r", 1), createOne(ctx, t, store, "r", 2), createOne(ctx, t, store, "r", 3)}
	poisonHistory(ctx, t, db, "r")
	_, err := store.Tasks.ReferenceTasksScan(ctx, "r", 0, 10)
	require.Error(t, err, "the scan of the packed history reads the poisoned row")

	got, err := store.Tasks.ReferenceTasks(ctx, "r", 0, 10)
	require.NoError(t, err)
	require.Equal(t, ids, idsOf(got))
	got, err = store.Tasks.ReferenceTasks(ctx, "r", ids[0], 10)
	require.NoError(t, err)
	require.Equal(t, ids[1:], idsOf(got))
	_, err = store.Tasks.ReferenceTasks(ctx, "r", 1<<40, 10)
	require.Equal(t, exactlyonce.EINVALID, exactlyonce.ErrorCode(err), "%v", err)

	// The head fails (by hand), the next heads the reference: a retry of the failed one goes back
	// in its place (no later task started), asking the directory, not the history.
	failHead := func() {
		_, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = attempts + 1, processed_at = NOW(6) WHERE id = ?", ids[0])
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, "UPDATE events SET state = 0 WHERE id = ?", ids[1])
		require.NoError(t, err)
	}
	failHead()
	placement, head, err := store.Tasks.RetryTask(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetryInPlace, placement)
	require.True(t, head)
	failHead()

	// A retry of the reference holds its bucket while a create of another reference of the bucket
	// comes: the retry is held at its head's lock (a transaction of the test's holds it) with the
	// bucket taken, the create waits for the bucket; once the head is let go, the retry reads the
	// reference's tasks (not the poisoned history) and commits, and the create goes on.
	holder, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer holder.Rollback()
	_, err = holder.ExecContext(ctx, "UPDATE events SET position = position WHERE id = ?", ids[1])
	require.NoError(t, err)
	retryDone := make(chan struct{})
	var retried exactlyonce.RetriedReference
	var retryErr error
	go func() {
		defer close(retryDone)
		retried, retryErr = store.Tasks.RetryReference(ctx, "r")
	}()
	awaitStatement(t, db, "UPDATE events SET position = position WHERE state < 2", retryDone)
	neighbour := taskstore.SameSlot("r", 1)[0]
	createDone := make(chan struct{})
	var createErr error
	go func() {
		defer close(createDone)
		_, createErr = store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(neighbour, 1)})
	}()
	awaitStatement(t, db, "UPDATE task_buckets SET position = position + CASE", createDone)
	require.NoError(t, holder.Commit())
	<-retryDone
	<-createDone
	require.NoError(t, retryErr)
	require.NoError(t, createErr)
	require.Equal(t, exactlyonce.RetryInPlace, retried.Placement)
	require.Equal(t, []int64{ids[0]}, retried.IDs)
}

func idsOf(es []exactlyonce.Event) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// Creates and retries of the same references race (8 references of one directory slot, so one task
// bucket, each with a failed task whose later task was delivered, so that its retry goes to the
// end): every reference's listing is its tasks in `events`, in position order, each once, the
// retried task at its new position.
func TestRacingCreatesAndRetriesKeepEachDirectory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 16)
	refs := taskstore.SameSlot("race", 8)
	failed := map[string]int64{}
	for _, ref := range refs {
		a := createOne(ctx, t, store, ref, 0)
		_, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE id = ?", a)
		require.NoError(t, err)
		b := createOne(ctx, t, store, ref, 1)
		_, err = db.ExecContext(ctx, "UPDATE events SET state = 10, value = 'HTTP 200', processed_at = NOW(6) WHERE id = ?", b)
		require.NoError(t, err)
		failed[ref] = a
	}
	const creators, perCreator, compactions = 6, 12, 20
	together(t, creators+len(refs)+1, func(w int) error {
		if w == creators+len(refs) {
			// The sweeper's compaction, moving what the creates log into the cells meanwhile.
			for range compactions {
				if _, err := store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute)); err != nil {
					return err
				}
			}
			return nil
		}
		if w >= creators {
			// A retry of one reference, racing the creates of it and of its neighbours.
			ref := refs[w-creators]
			var err error
			if w%2 == 0 {
				var p exactlyonce.RetryPlacement
				p, _, err = store.Tasks.RetryTask(ctx, failed[ref])
				if err == nil && p != exactlyonce.RetryAtEnd {
					err = fmt.Errorf("%s: retried %s, want at the end (a later task was delivered)", ref, p)
				}
			} else {
				var r exactlyonce.RetriedReference
				r, err = store.Tasks.RetryReference(ctx, ref)
				if err == nil && (r.Placement != exactlyonce.RetryAtEnd || len(r.IDs) != 1) {
					err = fmt.Errorf("%s: retried %+v, want its failed task at the end", ref, r)
				}
			}
			return err
		}
		for i := range perCreator {
			ref := refs[(w+i)%len(refs)]
			if _, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(ref, 100*w+i)}); err != nil {
				return err
			}
		}
		return nil
	})
	var total int
	for _, ref := range refs {
		want := requireDirectory(ctx, t, db, ref, 1)
		total += len(want)
		require.Equal(t, want, listed(ctx, t, store, ref), ref)
	}
	require.Equal(t, len(refs)*2+creators*perCreator, total)
	// And once every log row is in its cell: the same (a retry to the end compacts its slot
	// before it appends, so a create's entry logged before the retry never lands after it).
	_, err := store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, logRows(ctx, t, db), "the log, once compacted")
	for _, ref := range refs {
		want := requireDirectory(ctx, t, db, ref, 1)
		require.Equal(t, want, listed(ctx, t, store, ref), "%s, compacted", ref)
	}
}

// The tasks stored before the directory existed (a database migrated with tasks in it) get their
// entries from the backfill, a unit of ids per transaction: until it is done the reads scan as
// before and answer the same; a create and a retry to the end during the backfill write their
// own entries, which the backfill does not add again; two backfills at once add each entry once.
func TestTheBackfillGivesOldTasksTheirEntriesOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 8)
	refs := []string{"old-a", "old-b", "old-c"}
	// Tasks spread over several units of ids (plain events between them).
	for round := range 4 {
		for _, ref := range refs {
			createOne(ctx, t, store, ref, round)
		}
		for range 6 {
			_, err := store.Events.CreatePendingBatch(ctx, 200)
			require.NoError(t, err)
		}
	}
	// old-a's head failed, and the task after it delivered: its retry goes to the end.
	old := truth(ctx, t, db, "old-a")
	_, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE id = ?", old[0][0])
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "UPDATE events SET state = 10, value = 'HTTP 200', processed_at = NOW(6) WHERE id = ?", old[1][0])
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "UPDATE events SET state = 0 WHERE id = ?", old[2][0])
	require.NoError(t, err)
	require.NoError(t, mysqltest.ForgetReferenceDirectory(ctx, db))

	// A new store (a process started after the migration): the directory is not complete.
	before := store
	store = storesOn(t, db)
	for _, ref := range refs {
		entries, _, err := taskstore.DirectoryEntries(ctx, db, ref)
		require.NoError(t, err)
		require.Empty(t, entries)
		require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref), "%s: read by the scans until the backfill is done", ref)
	}
	// Not before begin_after (the previous version's API may still be creating).
	_, err = db.ExecContext(ctx, "UPDATE reference_backfill SET begin_after = NOW(6) + INTERVAL 1 HOUR")
	require.NoError(t, err)
	units, done, err := store.Tasks.BackfillDirectory(ctx, 5)
	require.NoError(t, err)
	require.Zero(t, units)
	require.False(t, done)
	var begun sql.NullInt64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT until_id FROM reference_backfill").Scan(&begun))
	require.False(t, begun.Valid, "not begun")
	_, err = db.ExecContext(ctx, "UPDATE reference_backfill SET begin_after = NOW(6)")
	require.NoError(t, err)

	// A retry to the end and a create (by the first store, with an id of its block, below the
	// counter: one the backfill walks) write their entries; then one unit, then the rest by two
	// backfills at once.
	placement, _, err := store.Tasks.RetryTask(ctx, old[0][0])
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetryAtEnd, placement)
	late := createOne(ctx, t, before, "old-b", 99)
	units, done, err = store.Tasks.BackfillDirectory(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, 1, units)
	require.False(t, done)
	other := storesOn(t, db)
	var wg sync.WaitGroup
	for _, s := range []*wire.Stores{store, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, done, err := s.Tasks.BackfillDirectory(ctx, 1)
				if !assertNoError(t, err) || done {
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, ref := range refs {
		want := requireDirectory(ctx, t, db, ref, 0)
		require.Equal(t, want, listed(ctx, t, store, ref), ref)
	}
	var next, until sql.NullInt64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT next_id, until_id FROM reference_backfill").Scan(&next, &until))
	require.True(t, until.Valid && next.Int64 >= until.Int64, "done: %v %v", next, until)
	require.Less(t, late, until.Int64, "the create during the backfill took an id the backfill walked")
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestALargeCreateAppendsEveryEntry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 4)
	batch := make([]exactlyonce.NewTask, 200)
	for i := range batch {
		batch[i] = refTask(fmt.Sprintf("many-%d", i%150), i)
	}
	_, err := store.Tasks.CreateTasks(ctx, batch)
	require.NoError(t, err)
	for i := range 150 {
		ref := fmt.Sprintf("many-%d", i)
		want := truth(ctx, t, db, ref)
		require.Len(t, want, 1+btoi(i < 50), ref)
		require.Equal(t, want, listed(ctx, t, store, ref), ref)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A create and a retry to the end of one reference, forced into both orders (the test holds the
// reference's head, so whichever comes first holds the bucket while the other waits for it): the
// one that took the bucket first takes the earlier position, and the directory lists the
// reference's tasks in `events`' order, each once.
func TestACreateAndARetryOfOneReferenceInBothOrders(t *testing.T) {
	t.Parallel()
	for _, retryFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("retryFirst=%v", retryFirst), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db, store := dbWithStores(t, 8)
			const ref = "both"
			failed := createOne(ctx, t, store, ref, 0)
			_, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE id = ?", failed)
			require.NoError(t, err)
			delivered := createOne(ctx, t, store, ref, 1)
			_, err = db.ExecContext(ctx, "UPDATE events SET state = 10, value = 'HTTP 200', processed_at = NOW(6) WHERE id = ?", delivered)
			require.NoError(t, err)
			head := createOne(ctx, t, store, ref, 2)

			holder, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			require.NoError(t, err)
			defer holder.Rollback()
			_, err = holder.ExecContext(ctx, "UPDATE events SET position = position WHERE id = ?", head)
			require.NoError(t, err)

			retryDone, createDone := make(chan struct{}), make(chan struct{})
			var placement exactlyonce.RetryPlacement
			var created int64
			var retryErr, createErr error
			retry := func() {
				defer close(retryDone)
				placement, _, retryErr = store.Tasks.RetryTask(ctx, failed)
			}
			create := func() {
				defer close(createDone)
				var got []exactlyonce.CreatedTask
				got, createErr = store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask(ref, 3)})
				if createErr == nil {
					created = got[0].ID
				}
			}
			if retryFirst {
				go retry()
				awaitStatement(t, db, "UPDATE events SET position = position WHERE state < 2", retryDone)
				go create()
				awaitStatement(t, db, "UPDATE task_buckets SET position = position + CASE", createDone)
			} else {
				go create()
				awaitStatement(t, db, "UPDATE events SET position = position WHERE state < 2", createDone)
				go retry()
				awaitStatement(t, db, "UPDATE task_buckets SET position = position WHERE", retryDone)
			}
			require.NoError(t, holder.Commit())
			<-retryDone
			<-createDone
			require.NoError(t, retryErr)
			require.NoError(t, createErr)
			require.Equal(t, exactlyonce.RetryAtEnd, placement)

			want := requireDirectory(ctx, t, db, ref, 1)
			require.Equal(t, want, listed(ctx, t, store, ref))
			order := []int64{}
			for _, e := range want {
				if e[0] == failed || e[0] == created {
					order = append(order, e[0])
				}
			}
			if retryFirst {
				require.Equal(t, []int64{failed, created}, order, "the retry took the bucket first")
			} else {
				require.Equal(t, []int64{created, failed}, order, "the create took the bucket first")
			}
		})
	}
}

// A backfill cut off at any point (its context cancelled mid-statement, so its transaction is
// rolled back) loses nothing and adds nothing twice: cut off again and again, it still ends with
// each task's entry once.
func TestABackfillCutOffAnywhereEndsWithEachEntryOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, store := dbWithStores(t, 8)
	refs := []string{"cut-a", "cut-b"}
	for round := range 6 {
		for _, ref := range refs {
			createOne(ctx, t, store, ref, round)
		}
		_, err := store.Events.CreatePendingBatch(ctx, 200)
		require.NoError(t, err)
	}
	require.NoError(t, mysqltest.ForgetReferenceDirectory(ctx, db))
	store = storesOn(t, db)
	cuts := 0
	for i := 0; ; i++ {
		// Deadlines from 0.2 ms to 30 ms, over and over, so that the cut falls on every statement
		// of a unit in turn, and some units are done whole. The longest deadline doubles every 300
		// cuts, so that on a loaded machine, where a unit can take longer than 30 ms, the backfill
		// still ends: what the test judges is what the cuts leave, not how fast a unit runs.
		span := 30000 << min(cuts/300, 12)
		short, stop := context.WithTimeout(ctx, time.Duration(200+(i*317)%span)*time.Microsecond)
		_, done, err := store.Tasks.BackfillDirectory(short, 2)
		stop()
		if err != nil {
			// Cut off: in a statement, or before it could connect.
			require.Less(t, cuts, 5000, "the backfill keeps failing: %v", err)
			cuts++
			continue
		}
		if done {
			break
		}
	}
	t.Logf("%d backfills cut off", cuts)
	require.Positive(t, cuts)
	for _, ref := range refs {
		requireDirectory(ctx, t, db, ref, 0)
	}
}
