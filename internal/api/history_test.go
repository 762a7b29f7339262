package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/stretchr/testify/require"
)

// GET /history answers the history by tier, which adds up to GET /events's count: created events
// are rows of events; a packed history is in the pages, exact, with its rows estimated; nothing is
// archived in this build.
func TestHistoryByTier(t *testing.T) {
	t.Parallel()
	b := setup(t)
	history := func() (tiers, events, pages map[string]any) {
		t.Helper()
		status, got, _ := b.do(t, "GET", "/history", "")
		require.Equal(t, http.StatusOK, status, "%v", got)
		status, count, _ := b.do(t, "GET", "/events", "")
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, count["count"], got["total"], "the tiers' total is the count: %v", got)
		require.Contains(t, got, "archive")
		require.Nil(t, got["archive"], "nothing archives in this build")
		at, err := time.Parse(time.RFC3339Nano, got["time"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), at, time.Hour)
		return got, got["events"].(map[string]any), got["pages"].(map[string]any)
	}
	got, events, pages := history()
	require.EqualValues(t, 0, got["total"])
	require.EqualValues(t, 0, events["rows"])
	// The pages hold no event, exactly; their rows are InnoDB's estimate (TABLE_ROWS), which a
	// database leased from the pool may carry over from its last user for a while (a fresh clone's
	// run read 40 here once): a count of rows is not asserted where it is only estimated.
	require.EqualValues(t, 0, pages["events"])
	require.Equal(t, true, pages["rowsEstimated"])
	require.GreaterOrEqual(t, pages["rows"], 0.0)

	for range 3 {
		status, _, _ := b.do(t, "POST", "/events", "")
		require.Equal(t, http.StatusCreated, status)
	}
	status, _, _ := b.do(t, "POST", "/events/async", "")
	require.Equal(t, http.StatusAccepted, status)
	got, events, pages = history()
	require.EqualValues(t, 4, got["total"])
	require.EqualValues(t, 4, events["rows"])
	require.EqualValues(t, 0, pages["events"])

	_, err := mysqltest.LoadPackedHistory(context.Background(), b.store.DB.Pool(), 25_000, nil)
	require.NoError(t, err)
	got, events, pages = history()
	require.EqualValues(t, 25_004, got["total"])
	require.EqualValues(t, 4, events["rows"])
	require.EqualValues(t, 25_000, pages["events"])
	require.GreaterOrEqual(t, pages["rows"], 3.0, "25,000 events take three pages or four")
}

// Without the history's reader the route is a 500 with the generic message, and a write to it a 405.
func TestHistoryWithoutItsReader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stores := b.store.API()
	stores.History = nil
	srv := openapitest.NewServer(t, &api.Server{Stores: stores})
	resp, err := http.Get(srv.URL + "/history")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	status, got, h := b.do(t, "POST", "/history", "")
	require.Equal(t, http.StatusMethodNotAllowed, status, "%v", got)
	require.Equal(t, "GET", h.Get("Allow"))
}

// archivedTiers answers GET /history's read as a build with an archive would: the
// answer's archive is its pages and events.
type archivedTiers struct{}

func (archivedTiers) HistoryTiers(context.Context) (exactlyonce.HistoryTiers, error) {
	return exactlyonce.HistoryTiers{Time: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC), Total: 30_007, EventRows: 7,
		PagedEvents: 10_000, PageRows: 1, Archive: &exactlyonce.ArchiveTier{Pages: 2, Events: 20_000}}, nil
}

func TestHistoryWithAnArchive(t *testing.T) {
	t.Parallel()
	srv := openapitest.NewServer(t, &api.Server{Stores: api.Stores{Events: &fakeStore{}, History: archivedTiers{}}})
	resp, err := http.Get(srv.URL + "/history")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	require.Equal(t, map[string]any{"time": "2026-11-27T12:00:00Z", "total": 30_007.0, "events": map[string]any{"rows": 7.0},
		"pages":   map[string]any{"events": 10_000.0, "rows": 1.0, "rowsEstimated": true},
		"archive": map[string]any{"pages": 2.0, "events": 20_000.0}}, got)
}
