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
