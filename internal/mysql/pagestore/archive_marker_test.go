package pagestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pages the move passes without events get a marker, an object of no events, so that a read
// that misses a passed page's object knows the object is gone (migration 0037; docs/history.md).

// spread is an archive whose page 0 holds events and tasks, pages 1 and 2 none, and page 3 events,
// moved by the move up to page 4.
type spread struct {
	archived
	plain  int64   // a plain event of page 0
	tasks  []int64 // page 0's tasks (the first one failed, in `events`)
	newest []int64 // page 3's events
}

// newSpread makes a spread: 300 events on page 0 (history's, with tasks, when withTasks), the id
// counter raised past pages 1 and 2 (packAll), 20 events created by stores with a fresh block (page
// 3), the counter raised again and everything packed, for the move to move up to page 4.
func newSpread(t *testing.T, withTasks bool) spread {
	t.Helper()
	ctx := context.Background()
	h := newArchived(t)
	var tasks []int64
	if withTasks {
		tasks, _ = history(t, h.store, 300)
	} else {
		createProcessed(t, h.store, 300)
		foldAll(t, h.store)
	}
	packAll(t, h.store)
	s := spread{archived: h, tasks: tasks}
	for id := int64(1); s.plain == 0 && id < 2000; id++ {
		e, err := h.store.Events.Get(ctx, id)
		if err == nil && e.Task == nil {
			s.plain = id
		}
	}
	later, err := wire.StoresOn(h.db, mysql.Config{}) // a fresh id block: past the raised counter
	require.NoError(t, err)
	s.newest = createProcessed(t, later, 20)
	require.EqualValues(t, 3, pages.PageOf(s.newest[0]), "page 3's events")
	require.EqualValues(t, 3, pages.PageOf(s.newest[len(s.newest)-1]))
	foldAll(t, h.store)
	packAll(t, h.store)
	return s
}

// place is history_archive's row: where the move stands, and which pages it has marked.
type place struct{ next, high, markedFrom, markedNext int64 }

func readPlace(t *testing.T, h archived) place {
	t.Helper()
	var p place
	require.NoError(t, h.db.QueryRow("SELECT next_page, high_page, marked_from, marked_next FROM history_archive").
		Scan(&p.next, &p.high, &p.markedFrom, &p.markedNext))
	return p
}

// requireMarker checks that the bucket holds page's marker: an object of the page with no event.
func requireMarker(t *testing.T, h archived, page int64) {
	t.Helper()
	obj, ok, err := h.client.GetPage(context.Background(), page, true)
	require.NoError(t, err)
	require.True(t, ok, "page %d, passed without events, has an object", page)
	cols, err := pages.ObjectColumns(obj, page)
	require.NoError(t, err)
	for _, c := range cols {
		n, err := pages.Count(c)
		require.NoError(t, err)
		require.Zero(t, n, "page %d's marker holds no event", page)
	}
	require.Less(t, len(obj), 1024, "a marker is small: %d bytes", len(obj))
}

// deleteObject deletes page's object from h's bucket, by hand.
func deleteObject(t *testing.T, h archived, page int64) {
	t.Helper()
	_, err := locals3.Client(t).DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(h.bucket), Key: aws.String(archive.Key(page))})
	require.NoError(t, err)
	_, ok, err := h.client.GetPage(context.Background(), page, true)
	require.NoError(t, err)
	require.False(t, ok, "page %d's object is gone", page)
}

// listDown follows the processed listing down from before (as a client follows `next`) to its
// first page of events, or its end, or its first error.
func listDown(store *wire.Stores, before int64, limit int) ([]exactlyonce.Event, error) {
	for range 1000 {
		got, resume, err := store.Events.ListEvents(context.Background(), "processed", "", before, limit)
		if err != nil || len(got) > 0 || resume == 0 {
			return got, err
		}
		before = resume
	}
	return nil, nil
}

// reader returns stores on h's database reading h's bucket with no cache, through a counter of
// its GETs and listings.
func reader(t *testing.T, h archived) (*wire.Stores, *countingArchive) {
	t.Helper()
	ca := &countingArchive{Archive: archive.New(locals3.Client(t), h.bucket, -1)}
	return wire.NewStores(h.store.DB).WithArchive(ca), ca
}

// An archived page's object deleted by hand (or by a lifecycle rule), in a bucket that still holds
// other pages: its events are not readable, so every read that needs them fails as an unavailable
// archive does (the API's 503), naming the page and the bucket: by id, a task's attempts, the
// processed listing, a reference's tasks; and so does an id of the page that names no event,
// which only the object could tell. The bucket is not listed. Before (the bucket holding some page
// objects), each answered as for a page without events: a 404, no attempts, listings without the
// page's events, while GET /events counted them.
func TestADeletedObjectOfAPageWithEventsReadsAsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSpread(t, true)
	require.EqualValues(t, 2, moveAll(t, ctx, s.store, 0).Pages, "pages 0 and 3")
	deleteObject(t, s.archived, 0)

	r, ca := reader(t, s.archived)
	missing := func(err error, what string) {
		t.Helper()
		require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "%s: %v", what, err)
		require.ErrorContains(t, err, "page 0 ", what)
		require.ErrorContains(t, err, s.bucket, what)
		require.Equal(t, "the history's archive is unavailable; try again", exactlyonce.ErrorMessage(err), what)
	}
	_, err := r.Events.Get(ctx, s.plain)
	missing(err, "an event of the page by id")
	_, err = r.Events.Get(ctx, 9_999)
	missing(err, "an id of the page that names no event")
	_, err = r.Tasks.Attempts(ctx, s.tasks[1])
	missing(err, "a task's attempts")
	_, _, err = r.Events.ListEvents(ctx, "processed", "", s.plain+1, 100)
	missing(err, "the processed listing of the page")
	_, err = listDown(r, s.newest[0], 100)
	missing(err, "the processed listing followed down to the page")
	_, err = r.Tasks.ReferenceTasks(ctx, "ref-1", 0, 100)
	missing(err, "a reference's tasks")
	require.Zero(t, ca.lists, "no listing of the bucket: the move wrote the page's object, which is gone")

	// The rest reads as before.
	e, err := r.Events.Get(ctx, s.newest[0])
	require.NoError(t, err, "page 3's object is there")
	require.Equal(t, s.newest[0], e.ID)
	got, err := listDown(r, 0, 10)
	require.NoError(t, err, "a page of the listing that does not reach page 0")
	require.Len(t, got, 10)
	require.EqualValues(t, 3, pages.PageOf(got[9].ID))
	_, err = r.Events.Get(ctx, s.tasks[0])
	require.NoError(t, err, "the failed task, in `events`")
}

// A page the move passes without events gets a marker: an object of no events, small, which the
// archive's counts do not count as a page. An id of it is unknown (ENOTFOUND, a 404) without a
// listing of the bucket, and the processed listing crosses it without one either. Before, the page
// had no object, and a read of an id of it asked the bucket for a listing to tell it from a page
// whose object is gone.
func TestAPageWithoutEventsGetsAMarker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSpread(t, true)
	var res exactlyonce.ArchiveResult
	for range 100 {
		got, err := s.store.Pages.ArchivePages(ctx, 0, time.Minute)
		require.NoError(t, err)
		if got.Pages+got.Markers == 0 {
			break
		}
		res.Pages += got.Pages
		res.Markers += got.Markers
	}
	require.EqualValues(t, 2, res.Pages, "pages 0 and 3")
	require.EqualValues(t, 3, res.Markers, "pages 1, 2 and 4")
	for _, page := range []int64{1, 2, 4} {
		requireMarker(t, s.archived, page)
	}
	require.Equal(t, place{next: 5, high: 4, markedFrom: 0, markedNext: 5}, readPlace(t, s.archived),
		"a fresh database has every page marked from 0")
	tiers := requireTiersAddUp(t, s.store)
	require.EqualValues(t, 2, tiers.Archive.Pages, "a marker is not a page of events")

	r, ca := reader(t, s.archived)
	_, err := r.Events.Get(ctx, 1*pages.Size+5)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "an id of a page without events: %v", err)
	_, err = r.Events.Get(ctx, 2*pages.Size)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "%v", err)
	got, err := listDown(r, s.newest[0], 100)
	require.NoError(t, err)
	require.NotEmpty(t, got)
	require.Less(t, got[0].ID, int64(pages.Size), "the listing crossed pages 2 and 1 to page 0")
	require.Zero(t, ca.lists, "no listing of the bucket")
	require.Equal(t, listAll(t, s.store, "", 100), listAll(t, r, "", 100))
	audit, err := mysqltest.AuditArchived(ctx, s.db, s.client)
	require.NoError(t, err)
	n, err := s.store.Events.Count(ctx)
	require.NoError(t, err)
	require.Len(t, audit, int(n), "every event once, across the tiers")
}

// An archive written before migration 0037: its move passed pages without events leaving no
// object. The migration records the first page from which every passed page has an object
// (marked_from, the highest page the move passed or will pass next), and below it a read reads as
// before: a page without an object, in a bucket that holds pages, is one without events (a 404,
// after a listing of the bucket), whether it never had events or its object was deleted. The pages
// the move passes from then on get markers.
func TestAnArchiveFromBeforeTheMarkersReadsAsBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSpread(t, true)
	require.EqualValues(t, 2, moveAll(t, ctx, s.store, 0).Pages)
	// As the code before the migration left it: no marker, and a database migrated to 0036.
	for _, page := range []int64{1, 2, 4} {
		deleteObject(t, s.archived, page)
	}
	_, err := s.db.Exec("ALTER TABLE history_archive DROP COLUMN marked_from, DROP COLUMN marked_next")
	require.NoError(t, err)
	_, err = s.db.Exec("DELETE FROM schema_migrations WHERE version = 37")
	require.NoError(t, err)
	require.NoError(t, mysql.Migrate(ctx, s.db))
	require.Equal(t, place{next: 5, high: 4, markedFrom: 5, markedNext: 5}, readPlace(t, s.archived),
		"marked from the page after the last one the move passed")

	r, ca := reader(t, s.archived)
	_, err = r.Events.Get(ctx, 1*pages.Size+5)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "an id of a page passed without events: %v", err)
	require.Equal(t, 1, ca.lists, "after a listing of the bucket, as before")
	e, err := r.Events.Get(ctx, s.plain)
	require.NoError(t, err)
	require.Equal(t, s.plain, e.ID)
	deleteObject(t, s.archived, 0)
	_, err = r.Events.Get(ctx, s.plain)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err),
		"below marked_from, a deleted object reads as a page without events, as before: %v", err)

	// The move goes on from there with markers: pages 5 and 6 without events, page 7's events.
	_, err = s.db.Exec("UPDATE status SET id = id + 10000")
	require.NoError(t, err)
	later, err := wire.StoresOn(s.db, mysql.Config{})
	require.NoError(t, err)
	seventh := createProcessed(t, later, 5)
	require.EqualValues(t, 7, pages.PageOf(seventh[0]))
	foldAll(t, s.store)
	packAll(t, s.store)
	require.EqualValues(t, 1, moveAll(t, ctx, s.store, 0).Pages, "page 7")
	requireMarker(t, s.archived, 5)
	requireMarker(t, s.archived, 6)
	require.Equal(t, place{next: 9, high: 8, markedFrom: 5, markedNext: 9}, readPlace(t, s.archived))
	lists := ca.lists
	_, err = r.Events.Get(ctx, 6*pages.Size+1)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "%v", err)
	require.Equal(t, lists, ca.lists, "a marked page: no listing")
	e, err = r.Events.Get(ctx, seventh[0])
	require.NoError(t, err)
	require.Equal(t, seventh[0], e.ID)
}

// A move of the code before migration 0037 (a sweeper invocation still running it during the
// deploy) passes pages without events and writes no marker: marked_next stays before them, so a
// read there still asks the bucket as before, and the next move of the current code starts again
// at marked_next, writes their markers and moves marked_next up to its place. Without that start,
// marked_next stayed behind for good and no page after it was read as marked.
func TestAMoveOfTheCodeBeforeMarkersIsMadeUpFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSpread(t, false)
	moveAll(t, ctx, s.store, 0)
	require.Equal(t, place{next: 5, high: 4, markedFrom: 0, markedNext: 5}, readPlace(t, s.archived))

	// Pages 5 to 8 without events; the old code's move passes 5 and 6.
	_, err := s.db.Exec("UPDATE status SET id = id + 30000")
	require.NoError(t, err)
	_, err = s.db.Exec("UPDATE history_archive SET next_page = 7")
	require.NoError(t, err)
	later, err := wire.StoresOn(s.db, mysql.Config{})
	require.NoError(t, err)
	ninth := createProcessed(t, later, 5)
	require.EqualValues(t, 9, pages.PageOf(ninth[0]))
	foldAll(t, s.store)
	packAll(t, s.store)
	require.EqualValues(t, 1, moveAll(t, ctx, s.store, 0).Pages, "page 9")
	for page := int64(5); page <= 8; page++ {
		requireMarker(t, s.archived, page)
	}
	require.Equal(t, place{next: 11, high: 10, markedFrom: 0, markedNext: 11}, readPlace(t, s.archived))
	r, ca := reader(t, s.archived)
	_, err = r.Events.Get(ctx, 6*pages.Size+1)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "%v", err)
	require.Zero(t, ca.lists)
}

// A process moving pages, killed (SIGKILL) before a marker's PUT (Mark) or after it, inside the
// transaction that moves the move's place past the page, before its commit (Pass): every event is
// still read, listed and audited once, and the next move finishes (its PUT of a marker the killed
// one wrote is refused, as the bucket holds it, and changes nothing): the markers are there, an id
// of a page without events is a 404 without a listing, and the archive counts its two pages.
func TestKillingTheMoverAroundAMarkerLosesNothing(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"Mark", "Pass"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := newSpread(t, false)
			var ids []int64
			for _, id := range listAll(t, s.store, "", 100) {
				if pages.PageOf(id) == 0 {
					ids = append(ids, id)
				}
			}
			require.Len(t, ids, 300)
			ids = append(ids, s.newest...)
			check := func(what string) {
				t.Helper()
				for _, id := range ids {
					e, err := s.store.Events.Get(ctx, id)
					require.NoError(t, err, "%s: event %d", what, id)
					require.Equal(t, id, e.ID)
				}
				require.Len(t, listAll(t, s.store, "", 100), len(ids), what)
				audit, err := mysqltest.AuditArchived(ctx, s.db, s.client)
				require.NoError(t, err)
				require.Len(t, audit, len(ids), "%s: every event once, across the tiers", what)
				requireTiersAddUp(t, s.store)
			}
			check("before")

			mover := child.Start(t, "mover", "DB_DSN="+s.dsn, "HISTORY_BUCKET="+s.bucket, "HISTORY_RETENTION=0",
				"AWS_ENDPOINT_URL_S3="+locals3.Endpoint(t), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test",
				"AWS_SECRET_ACCESS_KEY=test", "KILL_AT="+step)
			_, err := mover.WaitLine("at "+step+" of page 1", 60*time.Second)
			require.NoError(t, err, "the mover reached %s: %v", step, mover.Output())
			mover.Kill()
			_, marked, err := s.client.GetPage(ctx, 1, true)
			require.NoError(t, err)
			require.Equal(t, step == "Pass", marked, "the killed move wrote page 1's marker only if it passed its PUT")
			check("killed at " + step)

			require.EventuallyWithT(t, func(c *assert.CollectT) {
				_, err := s.store.Pages.ArchivePages(ctx, 0, time.Minute)
				require.NoError(c, err)
				require.Equal(c, place{next: 5, high: 4, markedFrom: 0, markedNext: 5}, readPlace(t, s.archived))
			}, 60*time.Second, 100*time.Millisecond)
			for _, page := range []int64{1, 2, 4} {
				requireMarker(t, s.archived, page)
			}
			check("moved after the kill at " + step)
			tiers := requireTiersAddUp(t, s.store)
			require.EqualValues(t, len(ids), tiers.Archive.Events)
			require.EqualValues(t, 2, tiers.Archive.Pages)
			r, ca := reader(t, s.archived)
			_, err = r.Events.Get(ctx, 1*pages.Size+5)
			require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "%v", err)
			require.Zero(t, ca.lists)
		})
	}
}

// A page too large to move (over archiveMaxPageBytes of columns: ten thousand large tasks) stays in
// the database, where every read finds it, with a marker in the bucket, and the move goes on past
// it to the pages after it. Before, the move counted it skipped and then stopped there for good: its
// pass took the page's rows for a race (it passes a page only without rows), so no page after it
// ever moved.
func TestAPageTooLargeToMoveIsPassed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSpread(t, false)
	s.store.Pages = s.store.Pages.WithMaxPageBytes(8 << 10) // page 0's 300 events are over it, page 3's 20 under
	ids := listAll(t, s.store, "", 100)
	res, err := s.store.Pages.ArchivePages(ctx, 0, time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Skipped, "page 0 is too large")
	require.EqualValues(t, 1, res.Pages, "page 3 moved")
	require.Equal(t, place{next: 5, high: 4, markedFrom: 0, markedNext: 5}, readPlace(t, s.archived))
	require.Positive(t, pageRows(t, s.db, 0), "page 0 stays in the database")
	require.Zero(t, pageRows(t, s.db, 3))
	requireMarker(t, s.archived, 0)

	r, ca := reader(t, s.archived)
	for _, id := range ids {
		e, err := r.Events.Get(ctx, id)
		require.NoError(t, err, id)
		require.Equal(t, id, e.ID)
	}
	_, err = r.Events.Get(ctx, 9_999)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "%v", err)
	require.Equal(t, ids, listAll(t, r, "", 100))
	require.Zero(t, ca.lists)
	audit, err := mysqltest.AuditArchived(ctx, s.db, s.client)
	require.NoError(t, err)
	require.Len(t, audit, len(ids))
	requireTiersAddUp(t, s.store)
}

// A move whose marked_next is behind pages that have their objects already (code rolled back to
// before migration 0037 for a while, then forward again) passes them again with a conditional PUT
// each, which the bucket refuses; the budget bounds those calls as it bounds the move's other
// calls to S3: with no budget left, one page a move. Before, a refused PUT did not count, and one
// move passed every such page whatever its budget.
func TestTheMovesBudgetBoundsItsMarkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSpread(t, false)
	moveAll(t, ctx, s.store, 0)
	_, err := s.db.Exec("UPDATE history_archive SET marked_next = 1")
	require.NoError(t, err)
	for want := int64(2); want <= 5; want++ {
		res, err := s.store.Pages.ArchivePages(ctx, 0, 0)
		require.NoError(t, err)
		require.Zero(t, res.Markers+res.Pages, "every page has its object already")
		require.Equal(t, place{next: 5, high: 4, markedFrom: 0, markedNext: want}, readPlace(t, s.archived))
	}
}
