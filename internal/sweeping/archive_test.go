package sweeping_test

import (
	"context"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The sweeper's maintenance moves pages older than the retention window to the archive after it
// packs them, and none younger; with no archive configured it moves nothing.
func TestMaintenanceMovesOldPagesToTheArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	client := locals3.Client(t)
	store.WithArchive(archive.New(client, locals3.Bucket(t, client), 0))
	pending(t, store, 300)
	// Every event settled, folded and packed by the first sweep, once ids are handed out past their
	// page.
	_, err := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), Retention: new(time.Hour)}).Sweep(ctx)
	require.NoError(t, err)
	_, err = store.DB.Pool().Exec("UPDATE status SET id = id + 30000")
	require.NoError(t, err)

	// GET /history's tiers, with the page rows counted exactly (the tiers' count is an estimate).
	type tiers struct{ pageRows, pagedEvents, archivedPages, archivedEvents int64 }
	read := func() tiers {
		t.Helper()
		h, err := store.Events.HistoryTiers(ctx)
		require.NoError(t, err)
		require.NotNil(t, h.Archive, "an archive is configured")
		rows, _, err := mysqltest.PageRowCounts(ctx, store.DB.Pool())
		require.NoError(t, err)
		return tiers{rows, h.PagedEvents, h.Archive.Pages, h.Archive.Events}
	}
	_, err = sweeping.New(store.Sweeping(), sweeping.Config{Retention: new(time.Hour)}).Maintain(ctx)
	require.NoError(t, err)
	require.Equal(t, tiers{pageRows: 1, pagedEvents: 300}, read(), "packed; younger than the window: kept")

	_, err = sweeping.New(store.Sweeping(), sweeping.Config{Retention: new(time.Duration(0))}).Maintain(ctx)
	require.NoError(t, err)
	require.Equal(t, tiers{archivedPages: 1, archivedEvents: 300}, read(), "a window of 0: moved")
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 300, n)
}

// An S3 endpoint that stops answering holds the maintenance no longer than the archive's Timeout:
// the move gives up (the page stays in the database, where every read finds it) and the sweep goes
// on settling due events, as an agent's loop, which runs the maintenance between its batches, must;
// once the endpoint answers again, the next maintenance moves the page.
func TestAStalledArchiveDoesNotHoldTheSweeperUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	s3srv, err := locals3.Start("", "", "history")
	require.NoError(t, err)
	t.Cleanup(s3srv.Stop)
	bucket := archive.New(locals3.NewClient(s3srv.URL), "history", -1)
	bucket.Timeout = time.Second
	store.WithArchive(bucket)
	pending(t, store, 300)
	sweeper := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), Retention: new(time.Duration(0))})
	_, err = sweeper.Sweep(ctx)
	require.NoError(t, err)
	_, err = store.DB.Pool().Exec("UPDATE status SET id = id + 30000")
	require.NoError(t, err)
	archived := func() int64 {
		t.Helper()
		h, err := store.Events.HistoryTiers(ctx)
		require.NoError(t, err)
		return h.Archive.Events
	}

	require.NoError(t, s3srv.Pause())
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, s3srv.Resume())
		}
	}
	t.Cleanup(resume)
	// within runs f and fails the test if it has not returned 15 s later (the Timeout is 1 s).
	within := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			resume() // lets the stuck call end
			t.Fatalf("%s still waits for the stalled S3 endpoint after 15 s (the archive's Timeout is 1 s)", what)
		}
	}
	within("the maintenance", func() { _, err = sweeper.Maintain(ctx) })
	require.NoError(t, err, "a move that failed is logged and tried again later, not the fold's error")
	require.Zero(t, archived(), "nothing moved while the endpoint stalls")
	pending(t, store, 5)
	within("a sweep", func() { _, err = sweeper.Sweep(ctx) })
	require.NoError(t, err)
	require.Zero(t, countPending(t, store), "the sweep settled the due events")
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 305, n)

	resume()
	_, err = sweeper.Maintain(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 305, archived(), "the endpoint answers again: the page moved, with the 5 events packed into it since")
}
