package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
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

// The console's reads of the history with the archive's S3 endpoint down (its process killed):
// what needs no archived page answers as it does with S3 up (an event of the window, the listing
// below id 1, the tiers' sizes and the counts of the overview page), and what needs one is the
// API's 503 passed on with its Retry-After, so that the page (and any caller of /ui/api) knows to
// try again, and with the API's message, which names no address. Before, the console dropped the
// Retry-After.
func TestTheConsoleReadsTheTiersWhileS3IsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s3srv, err := locals3.Start("", "", "history")
	require.NoError(t, err)
	t.Cleanup(s3srv.Stop)
	bucket := archive.New(locals3.NewClient(s3srv.URL), "history", -1)
	bucket.Timeout = time.Second
	// The literal allocator: the recent event takes its id past the ones handed out below, in the
	// window, not in the archived page (a late event).
	store := wire.NewStores(testdb.Core(t, mysql.Config{Allocator: mysql.AllocatorLiteral}, 4)).WithArchive(bucket)
	archived, err := store.Events.CreateProcessed(ctx, "archived")
	require.NoError(t, err)
	_, err = store.Events.FoldSettled(ctx, 100)
	require.NoError(t, err)
	_, err = store.DB.Pool().Exec("UPDATE status SET id = id + 30000")
	require.NoError(t, err)
	_, _, err = store.Pages.PackPages(ctx, 100, time.Hour)
	require.NoError(t, err)
	moved, err := store.Pages.ArchivePages(ctx, 0, time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 1, moved.Events)
	recent, err := store.Events.CreateProcessed(ctx, "recent")
	require.NoError(t, err)
	base := serve(t, Options{API: openapitest.Handler(t, &api.Server{Stores: store.API()})})

	get := func(path string) (int, http.Header, map[string]any) {
		t.Helper()
		status, h, body := do(t, "GET", base+"/ui/api/"+path, "", nil)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &m), body)
		return status, h, m
	}
	reads := []string{"events/" + strconv.FormatInt(recent.ID, 10), "events?state=processed&before=1", "history", "overview",
		fmt.Sprintf("events?state=processed&before=%d&limit=1", recent.ID+1)}
	up := map[string]map[string]any{}
	for _, p := range reads {
		status, _, body := get(p)
		require.Equal(t, http.StatusOK, status, "%s: %v", p, body)
		delete(body, "time")
		up[p] = body
	}
	require.Equal(t, map[string]any{"pages": 1.0, "events": 1.0}, up["history"]["archive"])

	s3srv.Stop()
	for _, p := range reads {
		status, _, body := get(p)
		require.Equal(t, http.StatusOK, status, "%s: %v", p, body)
		delete(body, "time")
		require.Equal(t, up[p], body, "%s needs no archived page", p)
	}
	status, h, body := get("events/" + strconv.FormatInt(archived.ID, 10))
	require.Equal(t, http.StatusServiceUnavailable, status, "%v", body)
	require.Equal(t, map[string]any{"error": "the history's archive is unavailable; try again"}, body)
	require.Equal(t, "1", h.Get("Retry-After"), "the API's Retry-After, passed on")
}
