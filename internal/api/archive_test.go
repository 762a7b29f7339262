package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// GET /events/{id} of an event moved to the archive answers as it did from `events`,
// over real HTTP against the real S3 protocol; with the archive's endpoint down it is a 503 that
// names no internal detail, and an event of the window still answers.
func TestAnArchivedEventOverHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s3srv, err := locals3.Start("", "", "history")
	require.NoError(t, err)
	t.Cleanup(s3srv.Stop)
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4)).WithArchive(archive.New(locals3.NewClient(s3srv.URL), "history", -1))
	b := &testBundle{store: store, srv: openapitest.NewServer(t, &api.Server{Stores: store.API()})}

	status, created, _ := b.do(t, "POST", "/events", "")
	require.Equal(t, http.StatusCreated, status)
	id := jsonID(int64(created["id"].(float64)))
	_, before, _ := b.do(t, "GET", "/events/"+id, "")

	// Folded, packed (ids handed out past its page) and moved with a window of 0.
	_, err = store.Events.FoldSettled(ctx, 100)
	require.NoError(t, err)
	_, err = store.DB.Pool().Exec("UPDATE status SET id = id + 30000")
	require.NoError(t, err)
	_, packed, err := store.Pages.PackPages(ctx, 100, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, packed)
	moved, err := store.Pages.ArchivePages(ctx, 0, time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 1, moved.Events)

	status, after, _ := b.do(t, "GET", "/events/"+id, "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, before, after, "the same answer from the bucket")
	status, count, _ := b.do(t, "GET", "/events", "")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 1, count["count"])
	// GET /history shows the archive's tier: the event left the page rows for the bucket.
	status, tiers, _ := b.do(t, "GET", "/history", "")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 1, tiers["total"])
	require.Equal(t, map[string]any{"pages": 1.0, "events": 1.0}, tiers["archive"], "%v", tiers)
	require.EqualValues(t, 0, tiers["pages"].(map[string]any)["events"])

	status, recent, _ := b.do(t, "POST", "/events", "")
	require.Equal(t, http.StatusCreated, status)
	s3srv.Stop()
	status, body, hdr := b.do(t, "GET", "/events/"+id, "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "the history's archive is unavailable; try again", body["error"])
	require.Equal(t, "1", hdr.Get("Retry-After"))
	status, _, _ = b.do(t, "GET", "/events/"+jsonID(int64(recent["id"].(float64))), "")
	require.Equal(t, http.StatusOK, status, "an event of the window does not need the archive")
	status, tiers, _ = b.do(t, "GET", "/history", "")
	require.Equal(t, http.StatusOK, status, "the tiers are counted in the database, not read from the bucket")
	require.Equal(t, map[string]any{"pages": 1.0, "events": 1.0}, tiers["archive"])
}
