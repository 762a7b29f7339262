package pagestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The archive: pages older than the retention window move to one S3 object a page (the
// real S3 protocol: tools/s3local, gofakes3), and every reader answers as before.

func TestArchivedHistoryReadsAsBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	tasks, failed := history(t, h.store, 1500)
	packAll(t, h.store)
	var counter int64
	require.NoError(t, h.db.QueryRow("SELECT id FROM status").Scan(&counter))
	before := readAll(t, h.store, 2000, tasks)
	require.Greater(t, len(before.events), 1500)
	require.Len(t, before.attempts[tasks[1]], 2, "a task delivered on its second attempt")

	// Young pages stay.
	res, err := h.store.Pages.ArchivePages(ctx, time.Hour, time.Minute)
	require.NoError(t, err)
	require.Zero(t, res.Pages, "every page is younger than an hour")

	moved := moveAll(t, ctx, h.store, 0)
	require.EqualValues(t, 1, moved.Pages, "ids 1-1,5xx: page 0")
	require.EqualValues(t, len(before.events)-1, moved.Events, "every event but the failed task")
	var pageRows int
	require.NoError(t, h.db.QueryRow("SELECT COUNT(*) FROM event_pages").Scan(&pageRows))
	require.Zero(t, pageRows, "the page's rows are deleted")
	tiers := requireTiersAddUp(t, h.store)
	require.EqualValues(t, 1, tiers.EventRows, "the failed task")
	require.Zero(t, tiers.PagedEvents)
	require.Equal(t, exactlyonce.ArchiveTier{Pages: 1, Events: moved.Events}, *tiers.Archive)

	after := readAll(t, h.store, 2000, tasks)
	require.Equal(t, before, after, "every reader answers as before: by id, attempts, the listing, the count")

	audit, err := mysqltest.AuditArchived(ctx, h.db, h.client)
	require.NoError(t, err)
	require.Len(t, audit, len(before.events), "every event once, across the tiers")
	inDB, err := mysqltest.AuditEvents(ctx, h.db)
	require.NoError(t, err)
	require.Len(t, inDB, 1, "the database holds the failed task only")
	tasksArchived, err := mysqltest.ArchivedTasks(h.client)(ctx, h.db)
	require.NoError(t, err)
	require.Len(t, tasksArchived, len(tasks)-1, "the checkers' read of the packed tasks finds the archived ones")

	// A processed task is not failed, from the archive; the failed one stays in `events` (failed
	// tasks are never packed, so never archived) and is retried there.
	_, _, err = h.store.Tasks.RetryTask(ctx, tasks[1])
	require.Equal(t, exactlyonce.ESTATE, exactlyonce.ErrorCode(err), "%v", err)
	_, _, err = h.store.Tasks.RetryTask(ctx, failed)
	require.NoError(t, err)
	_, _, err = h.store.Tasks.RetryTask(ctx, 9_999)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "an id of an archived page with no event: %v", err)

	require.Zero(t, moveAll(t, ctx, h.store, 0).Pages, "moving again moves nothing")

	// A lost settled_count row is re-created with the archived events counted (CountSettledEvents).
	n, err := h.store.Events.Count(ctx)
	require.NoError(t, err)
	_, err = h.db.Exec("DELETE FROM settled_count")
	require.NoError(t, err)
	require.NoError(t, mysql.Migrate(ctx, h.db))
	again, err := h.store.Events.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, n, again, "the count re-created from the tiers")
}

// A move that a pack overtakes: each interleaving of the move with late events of the page it moves,
// and with a pack holding the turn, loses no event and keeps each once. The move is held between
// its steps (WithArchiveSteps), the pack between its statements (WithPackSteps).
func TestTheMoveRacesLateEventsAndPacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	first := createProcessed(t, h.store, 700)[0]
	var gap int64 // ten ids taken by creates that insert late
	require.NoError(t, h.db.QueryRow("SELECT id + 1 FROM status").Scan(&gap))
	_, err := h.db.Exec("UPDATE status SET id = id + 10")
	require.NoError(t, err)
	createProcessed(t, h.store, 700)
	foldAll(t, h.store)
	packAll(t, h.store)
	require.Equal(t, 1, pageRows(t, h.db, 0))
	check := func(what string, late ...int64) {
		t.Helper()
		for _, id := range late {
			e, err := h.store.Events.Get(ctx, id)
			require.NoError(t, err, "%s: the late event %d", what, id)
			require.Equal(t, fmt.Sprintf("late-%d", id), *e.Value, what)
		}
		audit, err := mysqltest.AuditArchived(ctx, h.db, h.client)
		require.NoError(t, err)
		require.Len(t, audit, 1400+len(late), "%s: every event once, across the tiers", what)
		listed := listAll(t, h.store, "", 300)
		require.Len(t, listed, 1400+len(late), what)
		requireTiersAddUp(t, h.store)
	}

	// 1. A late event merged into the page's row after the move wrote and read back its object,
	// before it deletes the rows: the rows are no longer what it wrote, so it deletes nothing; the
	// page is in both tiers, and the next move writes it again with the late event.
	held := pagestore.WithArchiveSteps(ctx, func(page int64, step string) {
		if step == "Delete" {
			lateEvent(t, h.store, gap, fmt.Sprintf("late-%d", gap))
		}
	})
	res, err := h.store.Pages.ArchivePages(held, 0, time.Minute)
	require.NoError(t, err)
	require.Zero(t, res.Pages, "the move found the page changed, and left it")
	require.Equal(t, 1, pageRows(t, h.db, 0), "the page's row stays, with the late event merged in")
	check("moved while a late event was merged", gap)
	require.EqualValues(t, 1, moveAll(t, ctx, h.store, 0).Pages)
	require.Zero(t, pageRows(t, h.db, 0))
	check("moved again", gap)

	// 2. A late event of the page after it moved: the pack inserts a new row and lowers the move's
	// start to the page; a reader whose cache holds the page's old object finds the event (in the
	// row, then, once the row has moved, in the new object it asks for when the cached one misses
	// it); the next move merges the row into the object.
	client := locals3.Client(t)
	reader := wire.NewStores(h.store.DB).WithArchive(archive.New(client, h.bucket, 0))
	_, err = reader.Events.Get(ctx, first) // caches page 0's object
	require.NoError(t, err)
	lateEvent(t, h.store, gap+1, fmt.Sprintf("late-%d", gap+1))
	require.Equal(t, 1, pageRows(t, h.db, 0), "a new row for the late event")
	var next int64
	require.NoError(t, h.db.QueryRow("SELECT next_page FROM history_archive").Scan(&next))
	require.Zero(t, next, "the pack lowered the move's start to the late page")
	check("a late event of a moved page", gap, gap+1)
	require.EqualValues(t, 1, moveAll(t, ctx, h.store, 0).Pages)
	require.Zero(t, pageRows(t, h.db, 0))
	e, err := reader.Events.Get(ctx, gap+1)
	require.NoError(t, err, "a reader whose cached page misses the event asks the bucket again")
	require.Equal(t, fmt.Sprintf("late-%d", gap+1), *e.Value)
	check("the late row moved", gap, gap+1)

	// 3. A pack holding the turn when the move deletes: the move leaves the page (in both tiers)
	// and the next one moves it.
	packing := make(chan struct{})
	release := make(chan struct{})
	go func() {
		defer close(packing)
		pctx := pagestore.WithPackSteps(ctx, func(_ *sql.Tx, step string) {
			if step == "DeletePacked" {
				packing <- struct{}{}
				<-release
			}
		})
		_, err := h.db.Exec("INSERT INTO events (id, routing_hash, value, state, created_at, processed_at, processed_by, process_count) "+
			"VALUES (?, 0, ?, 10, NOW(6), NOW(6), 'api', 1)", gap+2, fmt.Sprintf("late-%d", gap+2))
		if err == nil {
			foldAll(t, h.store)
			_, _, err = h.store.Pages.PackPages(pctx, 100, time.Hour)
		}
		if err != nil {
			t.Error(err)
		}
	}()
	<-packing // the pack holds the turn, with the late event's row in page 0 not committed
	res, err = h.store.Pages.ArchivePages(ctx, 0, time.Minute)
	require.NoError(t, err)
	require.Zero(t, res.Pages, "the move waits for no pack: it leaves the page for the next time")
	close(release)
	<-packing
	require.EqualValues(t, 1, moveAll(t, ctx, h.store, 0).Pages)
	check("moved after the pack", gap, gap+1, gap+2)
}

// A process moving pages, killed (SIGKILL) at each step of the move: before it reads the page,
// before its PUT, before it reads the object back, before its delete, and inside the delete's
// transaction before it commits. Whatever it had done, every event is still read, listed and
// audited once, the tiers add up to the count, and the next move completes the page.
func TestKillingTheMoverAtEachStepLosesNothing(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"Read", "Put", "Verify", "Delete", "Commit"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := newArchived(t)
			createProcessed(t, h.store, 600)
			foldAll(t, h.store)
			packAll(t, h.store)
			var counter int64
			require.NoError(t, h.db.QueryRow("SELECT id FROM status").Scan(&counter))
			before := readAll(t, h.store, 1200, nil)
			require.Len(t, before.events, 600)

			mover := child.Start(t, "mover", "DB_DSN="+h.dsn, "HISTORY_BUCKET="+h.bucket, "HISTORY_RETENTION=0",
				"AWS_ENDPOINT_URL_S3="+locals3.Endpoint(t), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test",
				"AWS_SECRET_ACCESS_KEY=test", "KILL_AT="+step)
			_, err := mover.WaitLine("at "+step, 60*time.Second)
			require.NoError(t, err, "the mover reached %s: %v", step, mover.Output())
			mover.Kill()

			check := func(what string) {
				t.Helper()
				require.Equal(t, before, readAll(t, h.store, 1200, nil), what)
				audit, err := mysqltest.AuditArchived(ctx, h.db, h.client)
				require.NoError(t, err)
				require.Len(t, audit, 600, "%s: every event once, across the tiers", what)
				requireTiersAddUp(t, h.store)
			}
			check("killed at " + step)
			// The next move (the sweeper's next maintenance) completes it; its locks were released
			// with the killed process's connection.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				res, err := h.store.Pages.ArchivePages(ctx, 0, time.Minute)
				require.NoError(c, err)
				require.Zero(c, pageRows(t, h.db, 0), "moved: %+v", res)
			}, 60*time.Second, 100*time.Millisecond)
			check("moved after the kill at " + step)
			tiers := requireTiersAddUp(t, h.store)
			require.EqualValues(t, 600, tiers.Archive.Events, "the archive counts each event once")
			require.EqualValues(t, 1, tiers.Archive.Pages, "and its page once, whether the killed move created its object or not")
		})
	}
}

// Two moves of one page at once (two sweepers): one is held before its PUT with the page as it read
// it, while the other moves the page, a late event of the page is packed, and the page moves again
// with it. The held move's PUT is refused (each PUT is conditional on the object's version its move
// read), so its older object never replaces the newer one, and the late event is kept. Without the
// condition, the held PUT wrote the page without the late event, whose row was already deleted.
func TestTwoMovesAtOnceKeepTheNewerObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	createProcessed(t, h.store, 700)
	var gap int64
	require.NoError(t, h.db.QueryRow("SELECT id + 1 FROM status").Scan(&gap))
	_, err := h.db.Exec("UPDATE status SET id = id + 10")
	require.NoError(t, err)
	createProcessed(t, h.store, 700)
	foldAll(t, h.store)
	packAll(t, h.store)

	arrived, release := make(chan struct{}), make(chan struct{})
	held := make(chan pagestore.ArchiveResult, 1)
	go func() {
		bctx := pagestore.WithArchiveSteps(ctx, func(_ int64, step string) {
			if step == "Put" {
				close(arrived)
				<-release
			}
		})
		res, err := h.store.Pages.ArchivePages(bctx, 0, time.Minute)
		if err != nil {
			t.Error(err)
		}
		held <- res
	}()
	<-arrived
	require.EqualValues(t, 1, moveAll(t, ctx, h.store, 0).Pages, "the other move moves the page")
	lateEvent(t, h.store, gap, fmt.Sprintf("late-%d", gap))
	require.EqualValues(t, 1, moveAll(t, ctx, h.store, 0).Pages, "and its late event")
	close(release)
	require.Zero(t, (<-held).Pages, "the held move's PUT is refused: it leaves the page")

	e, err := h.store.Events.Get(ctx, gap)
	require.NoError(t, err, "the late event is in the page's object")
	require.Equal(t, fmt.Sprintf("late-%d", gap), *e.Value)
	audit, err := mysqltest.AuditArchived(ctx, h.db, h.client)
	require.NoError(t, err)
	require.Len(t, audit, 1401, "every event once")
	requireTiersAddUp(t, h.store)
}

// A reference's listing reads its directory and then each task by id (taskstore), through the
// tiers: its archived tasks are listed as before the move. And a database migrated to the directory
// with its tasks already archived gets their entries from the backfill, which reads the archived
// page's object (History.ReadColumns): the listing is the same again once the backfill is done.
func TestAnArchivedReferenceListsAsBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	history(t, h.store, 100)
	packAll(t, h.store)
	refs := []string{"ref-0", "ref-1", "ref-2", "ref-f"}
	list := func(store *wire.Stores) map[string][]exactlyonce.Event {
		t.Helper()
		out := map[string][]exactlyonce.Event{}
		for _, ref := range refs {
			got, err := store.Tasks.ReferenceTasks(ctx, ref, 0, 100)
			require.NoError(t, err, ref)
			out[ref] = got
		}
		return out
	}
	before := list(h.store)
	require.Len(t, before["ref-0"], 7)
	require.Len(t, before["ref-f"], 1)

	moved := moveAll(t, ctx, h.store, 0)
	require.EqualValues(t, 1, moved.Pages)
	require.Zero(t, pageRows(t, h.db, 0), "the tasks are in the bucket only")
	require.Equal(t, before, list(h.store), "the directory's listing reads archived tasks by id")

	require.NoError(t, mysqltest.ForgetReferenceDirectory(ctx, h.db))
	migrated, err := wire.StoresOn(h.db, mysql.Config{})
	require.NoError(t, err)
	migrated.WithArchive(h.client)
	for done := false; !done; {
		_, done, err = migrated.Tasks.BackfillDirectory(ctx, 1000)
		require.NoError(t, err)
	}
	require.Equal(t, before, list(migrated), "the backfill found the archived tasks")
}

// A page being moved (the mover killed, SIGKILL, after its PUT: the object written, maybe read
// back, the delete's transaction maybe open, the rows not deleted) reads as before with S3 down
// (its local endpoint's process killed): the move has not passed the page (high_page), so every
// event of it is in its rows, and no read asks the bucket: by id, the listing, the count, the
// audit. Before, the audit read every page's object up to the id counter's, and failed.
func TestAPageBeingMovedReadsWithoutS3(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"Verify", "Delete", "Commit"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s3srv, err := locals3.Start("", "", "history")
			require.NoError(t, err)
			t.Cleanup(s3srv.Stop)
			db, dsn := testdb.DB(t, 8)
			store, err := wire.StoresOn(db, mysql.Config{})
			require.NoError(t, err)
			bucket := archive.New(locals3.NewClient(s3srv.URL), "history", -1)
			bucket.Timeout = time.Second
			store.WithArchive(bucket)
			createProcessed(t, store, 600)
			foldAll(t, store)
			packAll(t, store)
			before := readAll(t, store, 1200, nil)
			require.Len(t, before.events, 600)

			mover := child.Start(t, "mover", "DB_DSN="+dsn, "HISTORY_BUCKET=history", "HISTORY_RETENTION=0",
				"AWS_ENDPOINT_URL_S3="+s3srv.URL, "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test",
				"AWS_SECRET_ACCESS_KEY=test", "KILL_AT="+step)
			_, err = mover.WaitLine("at "+step, 60*time.Second)
			require.NoError(t, err, "the mover reached %s: %v", step, mover.Output())
			mover.Kill()
			_, ok, err := bucket.GetPage(ctx, 0, true)
			require.NoError(t, err)
			require.True(t, ok, "the page's object is written")
			require.Equal(t, 1, pageRows(t, db, 0), "and its rows are not deleted")

			s3srv.Stop()
			require.Equal(t, before, readAll(t, store, 1200, nil), "every read as before, with S3 down")
			audit, err := mysqltest.AuditArchived(ctx, db, bucket)
			require.NoError(t, err, "the audit needs no object of a page the move has not passed")
			require.Len(t, audit, 600)
		})
	}
}

// A process that creates rarely does not make late events of a page moved long ago: its create
// after its block's max age takes a fresh id, above the moved pages, so the pack writes no row
// there and the move's start stays where it was. Before ALLOCATOR_BLOCK_MAX_AGE, the create took
// the next id of the block it reserved before the page filled, was packed into the moved page and
// lowered the move's start to it, which then stopped the move there for a window
// (docs/history.md, "Late events").
func TestARareCreatorMakesNoLateEventOfAMovedPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	// Any block is older than a nanosecond at its next create, which comes after the pack and the
	// move below, many round trips later.
	rare, err := wire.StoresOn(h.db, mysql.Config{BlockMaxAge: time.Nanosecond})
	require.NoError(t, err)
	first, err := rare.Events.CreateProcessed(ctx, "rare")
	require.NoError(t, err)
	require.Zero(t, pages.PageOf(first.ID))
	createProcessed(t, h.store, 700)
	foldAll(t, h.store)
	packAll(t, h.store)
	moveAll(t, ctx, h.store, 0)
	require.Zero(t, pageRows(t, h.db, 0), "page 0 moved")
	var before int64
	require.NoError(t, h.db.QueryRow("SELECT next_page FROM history_archive").Scan(&before))
	require.Positive(t, before)

	later, err := rare.Events.CreateProcessed(ctx, "rare")
	require.NoError(t, err)
	require.GreaterOrEqual(t, pages.PageOf(later.ID), before, "the rare create's id %d is of a page the move has not passed", later.ID)
	foldAll(t, h.store)
	_, _, err = h.store.Pages.PackPages(ctx, 100, time.Hour)
	require.NoError(t, err)
	require.Zero(t, pageRows(t, h.db, 0), "no late row on the moved page")
	var after int64
	require.NoError(t, h.db.QueryRow("SELECT next_page FROM history_archive").Scan(&after))
	require.Equal(t, before, after, "the move's start is not lowered")
	e, err := h.store.Events.Get(ctx, later.ID)
	require.NoError(t, err)
	require.Equal(t, "rare", *e.Value)
}
