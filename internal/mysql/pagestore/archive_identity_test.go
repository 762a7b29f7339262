package pagestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Two databases, one bucket: each database's archive has an identity (migration 0038), which the
// move writes on every object (S3 user metadata), so that one database's read or move tells the
// other's object of a page from its own.

// archiveID is h's archive's identity (history_archive.archive_id).
func archiveID(t *testing.T, h archived) string {
	t.Helper()
	var id string
	require.NoError(t, h.db.QueryRow("SELECT archive_id FROM history_archive").Scan(&id))
	require.NotEmpty(t, id)
	return id
}

// sharing returns stores on h's database whose archive is bucket (another database's), with a cache.
func sharing(t *testing.T, h archived, bucket string) *wire.Stores {
	t.Helper()
	return wire.NewStores(h.store.DB).WithArchive(archive.New(locals3.Client(t), bucket, 0))
}

// movedPageZero returns an archive whose page 0's 300 events were moved to its bucket (their ids).
func movedPageZero(t *testing.T) (archived, []int64) {
	t.Helper()
	h := newArchived(t)
	ids := createProcessed(t, h.store, 300)
	foldAll(t, h.store)
	packAll(t, h.store)
	require.EqualValues(t, 1, moveAll(t, context.Background(), h.store, 0).Pages)
	require.EqualValues(t, 0, pages.PageOf(ids[0]))
	return h, ids
}

// emptyPageZero returns an archive whose events are past page 0 (the id counter raised before any),
// packed, not moved.
func emptyPageZero(t *testing.T) archived {
	t.Helper()
	h := newArchived(t)
	_, err := h.db.Exec("UPDATE status SET id = id + 30000")
	require.NoError(t, err)
	later, err := wire.StoresOn(h.db, mysql.Config{}) // a fresh id block: past the raised counter
	require.NoError(t, err)
	ids := createProcessed(t, later, 20)
	require.Positive(t, pages.PageOf(ids[0]))
	foldAll(t, h.store)
	packAll(t, h.store)
	return h
}

// B moved its page 0 to its bucket; its HISTORY_BUCKET then names the bucket A moved its own page
// 0 to (one bucket set on two stacks). B's read of an event of the page, by id (first from the
// bucket, then from the cache) and in the processed listing, is the archive's unavailability (the
// API's 503) naming the page, the bucket and both identities: never A's event of that id, which
// B answered before as its own.
func TestAReadRefusesAnotherDatabasesObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, aIDs := movedPageZero(t)
	b, bIDs := movedPageZero(t)
	require.Equal(t, aIDs[7], bIDs[7], "both databases have the id")

	r := sharing(t, b, a.bucket)
	for _, from := range []string{"the bucket", "the cache"} {
		e, err := r.Events.Get(ctx, bIDs[7])
		require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "by id, from %s: answered %+v, %v", from, e, err)
		require.ErrorContains(t, err, "page 0 ", from)
		require.ErrorContains(t, err, a.bucket, from)
		require.ErrorContains(t, err, archiveID(t, a), from)
		require.ErrorContains(t, err, archiveID(t, b), from)
		require.Equal(t, "the history's archive is unavailable; try again", exactlyonce.ErrorMessage(err))
	}
	got, _, err := r.Events.ListEvents(ctx, "processed", "", bIDs[len(bIDs)-1]+1, 100)
	require.Equal(t, exactlyonce.EUNAVAILABLE, exactlyonce.ErrorCode(err), "the processed listing: %d events, %v", len(got), err)
	require.ErrorContains(t, err, archiveID(t, a))

	// Its own bucket reads as before; and A's, A.
	_, err = b.store.Events.Get(ctx, bIDs[7])
	require.NoError(t, err)
	_, err = a.store.Events.Get(ctx, aIDs[7])
	require.NoError(t, err)
}

// An object written without an identity (by the move before migration 0038) reads as before: B's
// page 0, copied without its metadata to another bucket that B then reads, answers every read as
// B's own bucket does.
func TestAnObjectWithoutIdentityReadsAsBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := movedPageZero(t)
	obj, _, ok, err := b.client.ReadObject(ctx, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, archiveID(t, b), obj.Owner, "the move wrote its identity")
	client := locals3.Client(t)
	old := locals3.Bucket(t, client)
	require.NoError(t, archive.New(client, old, -1).PutPage(ctx, 0, obj.Bytes, ""), "as the move wrote it before")
	require.Empty(t, differ(readAll(t, b.store, 1200, nil), readAll(t, sharing(t, b, old), 1200, nil)))
}

// B's move, on a bucket where A moved page 0 first: it stops at A's object of the page, whether B
// has no events there (before, its marker's conditional PUT failed and it passed the page as
// marked, after which B read A's events as its own) or has some where A's object is a marker
// (before, it found no event of A's to tell, and replaced A's marker with its own events, which A
// then read as its own). The page is not passed, A's object is as it was, and the move's error
// names the bucket and both identities.
func TestAMoveStopsAtAnotherDatabasesObject(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		a, b      func(t *testing.T) archived
		bHasPage0 bool
	}{
		{"B has no event on the page", func(t *testing.T) archived { h, _ := movedPageZero(t); return h }, emptyPageZero, false},
		{"A's object is a marker", func(t *testing.T) archived {
			h := emptyPageZero(t)
			res, err := h.store.Pages.ArchivePages(context.Background(), 0, time.Minute)
			require.NoError(t, err)
			require.Positive(t, res.Markers)
			requireMarker(t, h, 0)
			return h
		}, func(t *testing.T) archived {
			h := newArchived(t)
			createProcessed(t, h.store, 300)
			foldAll(t, h.store)
			packAll(t, h.store)
			return h
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			a, b := c.a(t), c.b(t)
			aObj, _, ok, err := a.client.ReadPage(ctx, 0)
			require.NoError(t, err)
			require.True(t, ok)
			bShared := b
			bShared.store = sharing(t, b, a.bucket)
			rowsBefore := pageRows(t, b.db, 0)

			_, moveErr := bShared.store.Pages.ArchivePages(ctx, 0, time.Minute)
			require.ErrorContains(t, moveErr, "another database", "the move stops at A's object and says why")
			require.ErrorContains(t, moveErr, a.bucket)
			require.ErrorContains(t, moveErr, archiveID(t, a))
			require.ErrorContains(t, moveErr, archiveID(t, b))
			require.Equal(t, place{}, readPlace(t, b), "B's move did not pass page 0")
			require.Equal(t, rowsBefore, pageRows(t, b.db, 0), "B's rows of page 0 stay")
			after, _, ok, err := a.client.ReadPage(ctx, 0)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, aObj, after, "A's object is as it was")
			if !c.bHasPage0 { // an id of A's page 0, which B never had, is unknown to B, with no GET
				_, err := bShared.store.Events.Get(ctx, 7)
				require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "%v", err)
			}
		})
	}
}

// Migration 0038 run again (a deploy that retries it) keeps the archive's identity: its ALTER is
// found applied, and its UPDATE sets only a NULL identity, so the objects written under it stay
// this database's.
func TestTheIdentityOutlivesARerunOfItsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, ids := movedPageZero(t)
	id := archiveID(t, h)
	_, err := h.db.Exec("DELETE FROM schema_migrations WHERE version = 38")
	require.NoError(t, err)
	require.NoError(t, mysql.Migrate(ctx, h.db))
	require.Equal(t, id, archiveID(t, h))
	_, err = h.store.Events.Get(ctx, ids[7])
	require.NoError(t, err, "the page's object is still this database's")
}
