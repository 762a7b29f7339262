package pagestore_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The packed history: the sweeper's pack moves folded events into page rows of ten
// thousand ids, a unit of a thousand at a time, and every reader finds them there as it found them
// in `events`.

// createProcessed creates n events and settles them as the sweeper would.
func createProcessed(t *testing.T, store *wire.Stores, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	for len(ids) < n {
		batch, err := store.Events.CreatePendingBatch(ctx, min(200, n-len(ids)))
		require.NoError(t, err)
		ids = append(ids, batch...)
		for {
			settled, err := processDue(ctx, store, false, 0, 500)
			require.NoError(t, err)
			if settled == 0 {
				break
			}
		}
	}
	return ids
}

// foldAll folds every settled event into the count.
func foldAll(t *testing.T, store *wire.Stores) {
	t.Helper()
	for {
		n, err := store.Events.FoldSettled(context.Background(), 5000)
		require.NoError(t, err)
		if n == 0 {
			return
		}
	}
}

// listAll walks GET /events?state=processed's listing to its end, pages of limit.
func listAll(t *testing.T, store *wire.Stores, kind exactlyonce.Kind, limit int) []int64 {
	t.Helper()
	var ids []int64
	before := int64(0)
	for range 10_000 {
		got, resume, err := store.Events.ListEvents(context.Background(), "processed", kind, before, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(got), limit)
		for _, e := range got {
			require.Equal(t, exactlyonce.Processed, e.State)
			ids = append(ids, e.ID)
		}
		switch {
		case len(got) == limit:
			before = got[len(got)-1].ID
		case resume > 0:
			before = resume
		default:
			return ids
		}
	}
	t.Fatal("the listing did not end")
	return nil
}

func TestPackedHistoryReadsAsBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	db := store.DB.Pool()

	// Tasks: a reference whose first task fails (400) and whose second is delivered after it, and
	// references whose tasks are delivered on their second attempt (one 503 each), spread between
	// plain events so that they land on several pages.
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		id := r.Header.Get("webhook-id")
		seen[id]++
		switch {
		case strings.Contains(r.URL.Path, "refuse"):
			w.WriteHeader(http.StatusBadRequest)
		case seen[id] == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(srv.Close)
	engine := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Works: fixedWorks(false), Tasks: &processing.Tasks{
		Deliverer: webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: 5 * time.Second}),
		RetryBase: time.Millisecond, RetryMax: 2 * time.Millisecond}}
	deliver := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			b, err := engine.ProcessDue(ctx, 0, 100)
			require.NoError(t, err)
			var open int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events WHERE state < 10").Scan(&open))
			return b.Claimed == 0 && open == 0
		}, 30*time.Second, 5*time.Millisecond)
	}
	var tasks []int64
	// "task" is also every task's kind, and "ref-a" is in the payload of one of its tasks: neither
	// makes another task's record a match.
	refs := []string{"ref-a", "ref-b", "ref-failing", "task"}
	for round := range 5 {
		createProcessed(t, store, 500)
		var batch []exactlyonce.NewTask
		for _, ref := range refs[:2] {
			batch = append(batch, exactlyonce.NewTask{URL: srv.URL + "/ok", Payload: []byte(`{"round":1}`), ReferenceID: ref, MaxRetries: 3})
		}
		if round == 0 {
			batch = append(batch, exactlyonce.NewTask{URL: srv.URL + "/refuse", Payload: []byte(`{}`), ReferenceID: "ref-failing", MaxRetries: 3})
		}
		if round == 1 {
			batch = append(batch, exactlyonce.NewTask{URL: srv.URL + "/ok", Payload: []byte(`{}`), ReferenceID: "ref-failing", MaxRetries: 3})
		}
		if round == 3 {
			batch = append(batch, exactlyonce.NewTask{URL: srv.URL + "/ok", Payload: []byte(`{"see":"ref-a"}`), ReferenceID: "task", MaxRetries: 3})
		}
		got, err := store.Tasks.CreateTasks(ctx, batch)
		require.NoError(t, err)
		for _, c := range got {
			tasks = append(tasks, c.ID)
		}
		deliver()
	}
	failedTask := tasks[2]

	// Everything as the readers answer before the pack.
	var counter int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT id FROM status").Scan(&counter))
	before := map[int64]exactlyonce.Event{}
	for id := int64(1); id <= counter; id++ {
		e, err := store.Events.Get(ctx, id)
		if exactlyonce.ErrorCode(err) == exactlyonce.ENOTFOUND {
			continue // an id taken by no event (an agent's, say)
		}
		require.NoError(t, err)
		before[id] = e
	}
	require.Greater(t, len(before), 2500)
	attemptsBefore := map[int64][]exactlyonce.Attempt{}
	for _, id := range tasks {
		a, err := store.Tasks.Attempts(ctx, id)
		require.NoError(t, err)
		require.NotEmpty(t, a)
		attemptsBefore[id] = a
	}
	refsBefore := map[string][]exactlyonce.Event{}
	for _, ref := range refs {
		got, err := store.Tasks.ReferenceTasks(ctx, ref, 0, 100)
		require.NoError(t, err)
		refsBefore[ref] = got
	}
	require.Len(t, refsBefore["task"], 1)
	require.Len(t, refsBefore["ref-a"], 5)
	foldAll(t, store)
	listedBefore := listAll(t, store, "", 100)
	countBefore, err := store.Events.Count(ctx)
	require.NoError(t, err)

	// The ids up to the counter's page and the next are still being handed out: nothing packs there.
	packedPages, packedFirst, err := store.Pages.PackPages(ctx, 1000, time.Hour)
	require.NoError(t, err)
	require.LessOrEqual(t, packedPages, max(int64(counter/1000-1), 0), "units within two of the counter's wait")
	// Ids handed out past them (creates to come): now every page of the events is behind.
	_, err = db.ExecContext(ctx, "UPDATE status SET id = id + 2000")
	require.NoError(t, err)
	_, packed, err := store.Pages.PackPages(ctx, 1000, time.Hour)
	require.NoError(t, err)
	packed += packedFirst
	var left, failedLeft, attemptsLeft, pageRows int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM events WHERE state = 30), "+
		"(SELECT COUNT(*) FROM events WHERE state = 40), (SELECT COUNT(*) FROM task_attempts), (SELECT COUNT(*) FROM event_pages)").
		Scan(&left, &failedLeft, &attemptsLeft, &pageRows))
	require.Zero(t, left, "every folded processed event is packed")
	require.EqualValues(t, 1, failedLeft, "the failed task stays in events")
	require.EqualValues(t, 1, attemptsLeft, "only the failed task's attempt stays in task_attempts")
	require.EqualValues(t, 1, pageRows, "ids 1-2,5xx: one page, its units filled into one row")
	require.EqualValues(t, len(before)-1, packed, "every event but the failed task")

	// Every reader answers as before.
	for id := int64(1); id <= counter; id++ {
		got, err := store.Events.Get(ctx, id)
		want, ok := before[id]
		if !ok {
			require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), id)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, want.CreatedAt.UnixMicro(), got.CreatedAt.UnixMicro(), id)
		got.CreatedAt = want.CreatedAt
		if want.ProcessedAt != nil && got.ProcessedAt != nil {
			require.Equal(t, want.ProcessedAt.UnixMicro(), got.ProcessedAt.UnixMicro(), id)
			got.ProcessedAt = want.ProcessedAt
		}
		require.Equal(t, want, got, id)
	}
	for _, id := range tasks {
		a, err := store.Tasks.Attempts(ctx, id)
		require.NoError(t, err)
		require.Len(t, a, len(attemptsBefore[id]), id)
		for i := range a {
			require.True(t, a[i].Started.Equal(attemptsBefore[id][i].Started))
			a[i].Started = attemptsBefore[id][i].Started
		}
		require.Equal(t, attemptsBefore[id], a, id)
		// A page of them comes from the packed record as from task_attempts: after the first, one.
		if len(a) > 1 {
			page, err := store.Tasks.AttemptsAfter(ctx, id, a[0].Number, 1)
			require.NoError(t, err)
			require.Equal(t, []exactlyonce.Attempt{a[1]}, page, id)
		}
		page, err := store.Tasks.AttemptsAfter(ctx, id, a[len(a)-1].Number, 10)
		require.NoError(t, err)
		require.Empty(t, page, "none after the last, packed")
	}
	for _, ref := range refs {
		got, err := store.Tasks.ReferenceTasks(ctx, ref, 0, 100)
		require.NoError(t, err)
		require.Equal(t, ids(refsBefore[ref]), ids(got), ref)
		for i := range got {
			require.Equal(t, refsBefore[ref][i].State, got[i].State)
			require.Equal(t, refsBefore[ref][i].Task.Position, got[i].Task.Position)
		}
		// And from a cursor that is a packed task.
		after, err := store.Tasks.ReferenceTasks(ctx, ref, got[0].ID, 100)
		require.NoError(t, err)
		require.Equal(t, ids(got[1:]), ids(after), ref)
	}
	require.Equal(t, listedBefore, listAll(t, store, "", 100), "the processed listing, newest first, every event once")
	require.Equal(t, listedBefore, listAll(t, store, "", 7), "in pages of 7")
	taskList := listAll(t, store, exactlyonce.KindTask, 3)
	require.Len(t, taskList, len(tasks)-1, "every delivered task")
	count, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, countBefore, count)
	audit, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
	require.NoError(t, err)
	require.Len(t, audit, len(before), "every event once")
	_, err = store.Events.Get(ctx, counter+1)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "an id handed out with no event: %v", err)

	// The processed task is not failed, from its page; the failed one goes to the end of its
	// reference, behind the task delivered (and packed) after it.
	_, _, err = store.Tasks.RetryTask(ctx, tasks[0])
	require.Equal(t, exactlyonce.ESTATE, exactlyonce.ErrorCode(err), "%v", err)
	placement, _, err := store.Tasks.RetryTask(ctx, failedTask)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.RetryAtEnd, placement, "a later task of its reference was delivered, and is packed")

	// A database migrated to the reference directory (0016) with this history in it: the
	// backfill gives the packed tasks and the failed one their entries, and the listings answer
	// as they did.
	listings := map[string][]exactlyonce.Event{}
	for _, ref := range refs {
		listings[ref], err = store.Tasks.ReferenceTasks(ctx, ref, 0, 100)
		require.NoError(t, err)
	}
	require.NoError(t, mysqltest.ForgetReferenceDirectory(ctx, db))
	migrated := wire.NewStores(store.DB)
	for done := false; !done; {
		_, done, err = migrated.Tasks.BackfillDirectory(ctx, 3)
		require.NoError(t, err)
	}
	for _, ref := range refs {
		got, err := migrated.Tasks.ReferenceTasks(ctx, ref, 0, 100)
		require.NoError(t, err)
		require.Equal(t, listings[ref], got, ref)
	}

	// Packing again finds nothing.
	pagesAgain, _, err := store.Pages.PackPages(ctx, 1000, time.Hour)
	require.NoError(t, err)
	require.Zero(t, pagesAgain)
}

func ids(es []exactlyonce.Event) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// An event that settles into a unit already packed (a create that took its id long before it
// inserted) is merged into that unit's columns, the page keeping one row, and is read, listed and
// counted like the others.
func TestALateEventIsMergedIntoItsPackedUnit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	db := store.DB.Pool()
	createProcessed(t, store, 1200)
	// Ten ids taken by a create that has not inserted yet.
	var gap int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT id + 1 FROM status").Scan(&gap))
	_, err := db.ExecContext(ctx, "UPDATE status SET id = id + 10")
	require.NoError(t, err)
	createProcessed(t, store, 3000)
	foldAll(t, store)
	_, packed, err := store.Pages.PackPages(ctx, 100, time.Hour)
	require.NoError(t, err)
	require.Positive(t, packed)
	_, err = store.Events.Get(ctx, gap)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "%v", err)

	// The late insert, as InsertProcessed makes it.
	_, err = db.ExecContext(ctx, "INSERT INTO events (id, routing_hash, value, state, created_at, processed_at, processed_by, process_count) "+
		"VALUES (?, 0, 'late', 10, NOW(6), NOW(6), 'api', 1)", gap)
	require.NoError(t, err)
	foldAll(t, store)
	_, packed, err = store.Pages.PackPages(ctx, 100, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, packed)
	var rows int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM event_pages WHERE page = ?", gap/10_000).Scan(&rows))
	require.Equal(t, 1, rows, "the late event is merged into its unit: the page keeps one row")
	e, err := store.Events.Get(ctx, gap)
	require.NoError(t, err)
	require.Equal(t, "late", *e.Value)
	for _, id := range []int64{gap - 1, gap + 10} {
		_, err := store.Events.Get(ctx, id)
		require.NoError(t, err, id)
	}
	listed := listAll(t, store, "", 50)
	require.Len(t, listed, 4201)
	require.True(t, slices.IsSortedFunc(listed, func(a, b int64) int { return int(b - a) }))
	require.Contains(t, listed, gap)
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4201, n)
}

// Creates, reads and two packers race: every read of an event that exists answers it, whether it is
// in `events`, being packed, or packed; every event ends up stored once; the count stays exact.
func TestPackingRacesCreatesReadsAndAnotherPacker(t *testing.T) {
	t.Parallel()
	// A bound for the whole test, the reads of every event at its end too: on a loaded machine
	// those alone took a good part of a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 12))
	// Ids from 6,000 on, so that the events cross the boundary of pages 0 and 1 (id 10,000), and the
	// first unit packed into page 0 is not its first.
	_, err := store.DB.Pool().ExecContext(ctx, "UPDATE status SET id = 6000")
	require.NoError(t, err)
	const want = 8000
	var (
		mu      sync.Mutex
		created []int64
		packed  atomic.Int64
		reads   atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 3 {
		run(func() error {
			ids, err := store.Events.CreatePendingBatch(ctx, 50)
			if err != nil {
				return err
			}
			// Until each is processed: the claim skips a row that a folder's or a packer's locking
			// scan holds for an instant (SKIP LOCKED), and leaves it to a redelivery, as here.
			for left := ids; len(left) > 0; {
				out, err := processIDs(ctx, store, false, left...)
				if err != nil {
					return err
				}
				var again []int64
				for _, id := range left {
					if out[id] != exactlyonce.OutcomeSettled {
						again = append(again, id)
					}
				}
				left = again
			}
			mu.Lock()
			created = append(created, ids...)
			done := len(created) >= want
			mu.Unlock()
			if done {
				<-stop
			}
			return nil
		})
	}
	for range 2 {
		run(func() error {
			if _, err := store.Events.FoldSettled(ctx, 2000); err != nil {
				return err
			}
			_, n, err := store.Pages.PackPages(ctx, 5, time.Hour)
			packed.Add(n)
			return err
		})
	}
	for range 3 {
		run(func() error {
			mu.Lock()
			if len(created) == 0 {
				mu.Unlock()
				return nil
			}
			id := created[rand.IntN(len(created))]
			mu.Unlock()
			e, err := store.Events.Get(ctx, id)
			if err != nil {
				return err
			}
			if e.ID != id || e.State != exactlyonce.Processed {
				t.Errorf("Get(%d) answered %d in state %v", id, e.ID, e.State)
			}
			reads.Add(1)
			return nil
		})
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(created) >= want && packed.Load() >= want/2 || len(errs) > 0
	}, 50*time.Second, 10*time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, reads.Load())
	require.GreaterOrEqual(t, packed.Load(), int64(want/2), "the packers packed while the others ran")

	audit, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
	require.NoError(t, err)
	stored := map[int64]int{}
	for _, a := range audit {
		stored[a.ID]++
		require.Equal(t, exactlyonce.Processed, a.State)
		require.True(t, a.HasValue)
	}
	require.Len(t, stored, len(created))
	for _, id := range created {
		require.Equal(t, 1, stored[id], "event %d stored once", id)
	}
	require.Len(t, audit, len(created))
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(created), n)
	var inPages, page0, page1 int64
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COALESCE(SUM(events), 0), "+
		"COALESCE(SUM(page = 0), 0), COALESCE(SUM(page = 1), 0) FROM event_pages").Scan(&inPages, &page0, &page1))
	require.Equal(t, packed.Load(), inPages, "what the packers said they packed is in the pages")
	require.Positive(t, page0)
	require.Positive(t, page1, "the packs crossed into the second page")
	for _, id := range created {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err, id)
		require.Equal(t, id, e.ID)
	}
	// The processed listing, across the pages' boundary and partly from `events`: every event once,
	// newest first, in pages that end inside a column (70) and on a column's end (100).
	newest := slices.Clone(created)
	slices.Sort(newest)
	slices.Reverse(newest)
	for _, limit := range []int{70, 100} {
		require.Equal(t, newest, listAll(t, store, "", limit), "pages of %d", limit)
	}
}

// A pack starts no transaction once its budget has passed, but always one: the sweeper's
// maintenance, between an agent's batches, packs a long history a little at a time.
func TestAPackStopsStartingTransactionsAfterItsBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	_, err := mysqltest.LoadFoldedHistory(ctx, store.DB.Pool(), 40_000, nil)
	require.NoError(t, err)
	units, events, err := store.Pages.PackPages(ctx, 1000, 0)
	require.NoError(t, err)
	require.EqualValues(t, 10, units, "one transaction of 10 units, then the budget is spent")
	require.InDelta(t, 10_000, events, 1, "a unit is 1,000 ids (the first holds 999: ids start at 1)")
	units, _, err = store.Pages.PackPages(ctx, 1000, time.Hour)
	require.NoError(t, err)
	require.Positive(t, units, "the rest, with time")
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 40_000, n)
}
