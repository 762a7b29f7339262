package pagestore_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// A process without the archive (HISTORY_BUCKET unset on it: `HISTORY_BUCKET= make run`, or a
// second make run on the same database whose S3 is another) reads a database whose pages were
// moved to the bucket. Its reads of an archived event, of the processed listing and of a
// reference's tasks fail as an unavailable archive does, naming HISTORY_BUCKET. Before, the event
// did not exist (a 404), a task had no attempts, the listing left every archived event out, and the
// reference's listing failed as an internal error ("the directory of reference names task N, which
// is not stored"), while GET /events counted them all. A page the move never passed reads as before.
func TestAProcessWithoutTheArchiveDoesNotReadArchivedEventsAsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	tasks, _ := history(t, h.store, 300)
	packAll(t, h.store)
	plain := int64(0)
	for id := int64(1); plain == 0; id++ {
		e, err := h.store.Events.Get(ctx, id)
		if err == nil && e.Task == nil {
			plain = id
		}
	}
	require.Positive(t, moveAll(t, ctx, h.store, 0).Pages)

	bare, err := wire.StoresOn(h.db, mysql.Config{}) // the same database, no archive
	require.NoError(t, err)
	unavailable := func(err error, what string) {
		t.Helper()
		require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "%s: %v", what, err)
		require.ErrorContains(t, err, "HISTORY_BUCKET", what)
	}
	_, err = bare.Events.Get(ctx, plain)
	unavailable(err, "an archived plain event by id")
	_, err = bare.Events.Get(ctx, tasks[1])
	unavailable(err, "an archived task by id")
	_, err = bare.Tasks.Attempts(ctx, tasks[1])
	unavailable(err, "an archived task's attempts")
	err = func() error { // the listing followed down to the archived page, as listAll does
		before := int64(0)
		for range 1000 {
			got, resume, err := bare.Events.ListEvents(ctx, "processed", "", before, 100)
			switch {
			case err != nil:
				return err
			case len(got) == 100:
				before = got[len(got)-1].ID
			case resume > 0:
				before = resume
			default:
				return nil
			}
		}
		return nil
	}()
	unavailable(err, "the processed listing")
	_, err = bare.Tasks.ReferenceTasks(ctx, "ref-1", 0, 100)
	unavailable(err, "a reference's archived tasks")

	// The archive's own reads are unchanged, and a page the move never passed needs no archive.
	e, err := h.store.Events.Get(ctx, plain)
	require.NoError(t, err)
	require.Equal(t, plain, e.ID)
	var counter int64
	require.NoError(t, h.db.QueryRow("SELECT id FROM status").Scan(&counter))
	_, err = bare.Events.Get(ctx, counter+1)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "an id past the id counter: %v", err)
}

// A process whose archive is another bucket than the one the sweeper moved the pages to (a second
// make run on the same database with its own S3LOCAL_DIR; HISTORY_BUCKET naming another bucket)
// finds no object of a passed page, which is also what a page the move passed without events has.
// When the move has archived events and the bucket holds no page object at all, the read fails as
// an unavailable archive does, naming the bucket, for an event by id, a task's attempts and the
// processed listing. Before, each answered that the events did not exist (404s, no attempts, a
// listing without them). In the right bucket, an id of a page the move passed without events is
// still unknown (a 404), as is an id of an archived page that holds no such event.
func TestAProcessReadingAnotherBucketDoesNotReadArchivedEventsAsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	tasks, _ := history(t, h.store, 300)
	packAll(t, h.store) // raises the id counter by 30,000: the pages past the events have none
	plain := int64(0)
	for id := int64(1); plain == 0; id++ {
		e, err := h.store.Events.Get(ctx, id)
		if err == nil && e.Task == nil {
			plain = id
		}
	}
	later, err := wire.StoresOn(h.db, mysql.Config{}) // a fresh id block: past the raised counter
	require.NoError(t, err)
	newest := createProcessed(t, later, 20) // on a page past the empty ones
	foldAll(t, h.store)
	packAll(t, h.store)
	require.Positive(t, moveAll(t, ctx, h.store, 0).Pages)

	client := locals3.Client(t)
	other := locals3.Bucket(t, client)
	foreign, err := wire.StoresOn(h.db, mysql.Config{})
	require.NoError(t, err)
	foreign.WithArchive(archive.New(client, other, 0))
	unavailable := func(err error, what string) {
		t.Helper()
		require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "%s: %v", what, err)
		require.ErrorContains(t, err, other, what)
	}
	_, err = foreign.Events.Get(ctx, plain)
	unavailable(err, "an archived plain event by id")
	_, err = foreign.Tasks.Attempts(ctx, tasks[1])
	unavailable(err, "an archived task's attempts")
	_, _, err = foreign.Events.ListEvents(ctx, "processed", "", plain+1, 100)
	unavailable(err, "the processed listing of the archived page")

	// The right bucket: a passed page without events, and a missing id of an archived page.
	var high int64
	require.NoError(t, h.db.QueryRow("SELECT high_page FROM history_archive").Scan(&high))
	empty := pages.PageOf(tasks[len(tasks)-1]) + 1
	require.Less(t, empty, pages.PageOf(newest[0]), "a page without events between the two")
	require.Less(t, pages.PageOf(newest[0]), high, "the move passed them")
	_, err = h.store.Events.Get(ctx, empty*pages.Size)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "an id of a passed page without events: %v", err)
	_, err = h.store.Events.Get(ctx, plain)
	require.NoError(t, err)
	missing := int64(0)
	for id := plain; missing == 0; id++ {
		if _, err := h.store.Events.Get(ctx, id); exactlyonce.ErrorCode(err) == exactlyonce.ENOTFOUND {
			missing = id
		}
	}
	require.Equal(t, pages.PageOf(plain), pages.PageOf(missing), "a gap in the archived page")
}
