package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/stretchr/testify/require"
)

// listIDs reads a listing's page: its events' ids, in order, and its next cursor ("" for null).
func listIDs(t *testing.T, b *testBundle, path string) ([]int64, string, map[string]any) {
	t.Helper()
	status, got, _ := b.do(t, "GET", path, "")
	require.Equal(t, http.StatusOK, status, "%s: %v", path, got)
	var ids []int64
	for _, e := range got["events"].([]any) {
		ids = append(ids, int64(e.(map[string]any)["id"].(float64)))
	}
	next, _ := got["next"].(string)
	return ids, next, got
}

// failPlain makes a new plain event that fails for good at its first attempt (state 20).
func failPlain(t *testing.T, b *testBundle) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := b.store.Events.CreatePending(ctx)
	require.NoError(t, err)
	e := &processing.Engine{Store: b.store.Events, TaskStore: b.store.Tasks, By: exactlyonce.BySweeper, Works: exactlyonce.Works{exactlyonce.KindPlain: refuse{}},
		Backoff: exactlyonce.Backoff{MaxAttempts: 1, Base: time.Hour, Max: time.Hour}}
	out, err := e.ProcessIDs(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeFailed, out[id])
	return id
}

// fold folds every settled event into the counted partitions, as the sweeper does.
func fold(t *testing.T, b *testBundle) {
	t.Helper()
	for {
		n, err := b.store.Events.FoldSettled(context.Background(), 1000)
		require.NoError(t, err)
		if n == 0 {
			return
		}
	}
}

// The listing shows the events of one state, newest first, each exactly as GET /events/{id} shows
// it, filtered by kind; processed lists only the events not folded yet, and says so.
func TestListEventsByStateAndKind(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	recv := httptest.NewServer(&hookRecorder{status: []int{400}})
	t.Cleanup(recv.Close)

	// Two failed tasks, folded (40) with one processed event (30); then a processed event and a
	// failed plain event not folded (10, 20); three plain pending events; a pending task and one
	// queued behind it.
	f1 := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 1, "referenceId": "f"}`)
	f2 := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 2, "referenceId": "f"}`)
	deliverAll(t, b.store)
	status, got, _ := b.do(t, "POST", "/events", "")
	require.Equal(t, http.StatusCreated, status)
	folded := int64(got["id"].(float64))
	fold(t, b)
	_, got, _ = b.do(t, "POST", "/events", "")
	processed := int64(got["id"].(float64))
	failed := failPlain(t, b)
	var pending []int64
	for range 3 {
		_, got, _ := b.do(t, "POST", "/events/async", "")
		pending = append(pending, int64(got["id"].(float64)))
	}
	head := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 3, "referenceId": "q"}`)
	queued := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 4, "referenceId": "q"}`)

	for _, c := range []struct {
		query string
		want  []int64
	}{
		{"state=pending", []int64{head, pending[2], pending[1], pending[0]}},
		{"state=pending&kind=plain", []int64{pending[2], pending[1], pending[0]}},
		{"state=pending&kind=task", []int64{head}},
		{"state=queued", []int64{queued}},
		{"state=processing", nil},
		{"state=processed", []int64{processed, folded}},
		{"state=failed", []int64{failed, f2, f1}},
		{"state=failed&kind=task", []int64{f2, f1}},
		{"state=failed&kind=plain", []int64{failed}},
	} {
		ids, next, page := listIDs(t, b, "/events?"+c.query)
		require.Equal(t, c.want, ids, c.query)
		require.Empty(t, next, c.query)
		if kind, ok := strings.CutPrefix(c.query[strings.Index(c.query, "&")+1:], "kind="); ok {
			require.Equal(t, kind, page["kind"], c.query)
		} else {
			require.Nil(t, page["kind"], c.query)
		}
		// Each event as GET /events/{id} shows it.
		for _, e := range page["events"].([]any) {
			_, one, _ := b.do(t, "GET", "/events/"+jsonID(int64(e.(map[string]any)["id"].(float64))), "")
			require.Equal(t, one, e, c.query)
		}
	}
	_, page, _ := b.do(t, "GET", "/events?state=failed&kind=task", "")
	require.Equal(t, "HTTP 400: answer 400", page["events"].([]any)[0].(map[string]any)["exceptionMessage"])
}

// Pages follow each other through next and before with no gap and no duplicate, newest first, and
// the last page has no next.
func TestListEventsPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids, err := b.store.Events.CreatePendingBatch(context.Background(), 7)
	require.NoError(t, err)
	for _, limit := range []int{1, 2, 3, 6, 7, 8, 100} {
		var seen []int64
		path := fmt.Sprintf("/events?state=pending&limit=%d", limit)
		for pages := 0; ; pages++ {
			require.Less(t, pages, 8, "limit %d: too many pages", limit)
			got, next, _ := listIDs(t, b, path)
			require.LessOrEqual(t, len(got), limit)
			seen = append(seen, got...)
			if next == "" {
				break
			}
			require.Equal(t, strconv.FormatInt(got[len(got)-1], 10), next, "next is the last event shown")
			path = fmt.Sprintf("/events?state=pending&limit=%d&before=%s", limit, next)
		}
		require.Equal(t, []int64{ids[6], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]}, seen, "limit %d", limit)
	}
	// The default limit is 50.
	_, err = b.store.Events.CreatePendingBatch(context.Background(), 50)
	require.NoError(t, err)
	got, next, _ := listIDs(t, b, "/events?state=pending")
	require.Len(t, got, 50)
	require.Equal(t, strconv.FormatInt(got[49], 10), next)
}

// A page of tasks ends early once their JSON passes 4 MiB, so that it fits in a Lambda response;
// next goes on from there.
func TestListEventsPageOfLargePayloads(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	payload := `"` + strings.Repeat("p", 256<<10-2) + `"`
	var ids []int64
	for range 17 {
		ids = append(ids, createTask(t, b, `{"url": "https://example.com/x", "payload": `+payload+`}`))
	}
	got, next, _ := listIDs(t, b, "/events?state=pending&limit=100")
	require.Len(t, got, 15, "16 payloads of 256 KiB are 4 MiB, and with their tasks' other fields more")
	require.Equal(t, strconv.FormatInt(ids[2], 10), next)
	got, next, _ = listIDs(t, b, "/events?state=pending&limit=100&before="+next)
	require.Equal(t, []int64{ids[1], ids[0]}, got)
	require.Empty(t, next)
}

// The 4 MiB are the events as the answer carries them: JSON-escaped. The API's encoder writes '<',
// '>' and '&' as \u003c (six bytes for one), so 16 payloads of 256 KiB of '<' were a page of 25 MB,
// which no Lambda can answer (6 MB). Such a page holds the payloads whose escaped form fits: 2.
func TestListEventsPageOfEscapedPayloads(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	payload := `"` + strings.Repeat("<", 256<<10-2) + `"`
	var ids []int64
	for range 4 {
		ids = append(ids, createTask(t, b, `{"url": "https://example.com/x", "payload": `+payload+`}`))
	}
	require.LessOrEqual(t, pageBytes(t, b, "/events?state=pending&limit=100"), api.MaxListPayloadBytes+64<<10, "the page's bytes")
	got, next, _ := listIDs(t, b, "/events?state=pending&limit=100")
	require.Equal(t, []int64{ids[3], ids[2]}, got)
	got, next, _ = listIDs(t, b, "/events?state=pending&limit=100&before="+next)
	require.Equal(t, []int64{ids[1], ids[0]}, got)
	require.Empty(t, next)
}

// The 4 MiB are the whole events, not only their payloads: a task's url may be 2,048 bytes, 12 KiB
// once its '&' are escaped. 100 tasks of 40 KiB payloads and such urls (3.9 MiB of payloads) made
// a page of 5.2 MB when only the payloads were counted.
func TestListEventsPageCountsTheWholeEvents(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	url := "https://example.com/x?" + strings.Repeat("&", 2048-len("https://example.com/x?"))
	payload := `"` + strings.Repeat("p", 40<<10-2) + `"`
	for range 100 {
		createTask(t, b, `{"url": "`+url+`", "payload": `+payload+`}`)
	}
	require.LessOrEqual(t, pageBytes(t, b, "/events?state=pending&limit=100"), api.MaxListPayloadBytes+64<<10, "the page's bytes")
	got, next, _ := listIDs(t, b, "/events?state=pending&limit=100")
	require.Less(t, len(got), 100)
	require.NotEmpty(t, next)
}

// pageBytes is the size of the answer to GET path, which must be a 200.
func pageBytes(t *testing.T, b *testBundle, path string) int {
	t.Helper()
	resp, err := b.srv.Client().Get(b.srv.URL + path)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return len(body)
}

// Every bad parameter is a 400 that names it, and the count stays an answer of its own.
func TestListEventsBadParameters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ query, names string }{
		{"state=done", "state"},
		{"state=", "state"},
		{"state=folded", "state"},
		{"state=Pending", "state"},
		{"kind=task", "state"},
		{"state=failed&kind=job", "kind"},
		{"state=failed&kind=", "kind"},
		{"state=failed&before=x", "before"},
		{"state=failed&before=0", "before"},
		{"state=failed&before=-1", "before"},
		{"state=failed&before=01", "before"},
		{"state=failed&before=9223372036854775808", "before"},
		{"state=failed&limit=0", "limit"},
		{"state=failed&limit=101", "limit"},
		{"state=failed&limit=1.5", "limit"},
		{"state=failed&limit=+5", "limit"},
		{"state=failed&after=5", `"after"`},
		{"state=failed&sort=id", `"sort"`},
		{"x=1", `"x"`},
		{"state=failed&state=pending", "state"},
		{"state=failed&limit=5&limit=5", "limit"},
		{"state=failed&kind=task&kind=task", "kind"},
		{"state=failed&before=5&before=6", "before"},
		{"state=%zz", "query string"},
	} {
		status, got, _ := b.do(t, "GET", "/events?"+c.query, "")
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", c.query, got)
		require.Contains(t, got["error"], c.names, c.query)
	}
	status, got, _ := b.do(t, "GET", "/events", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"count": 0.0}, got, "nothing was written, and the count answers as before")
	require.Empty(t, b.queue.ids)
}

// overview reads GET /overview and checks it against GET /events's count.
func overview(t *testing.T, b *testBundle) map[string]any {
	t.Helper()
	status, got, _ := b.do(t, "GET", "/overview", "")
	require.Equal(t, http.StatusOK, status, "%v", got)
	_, count, _ := b.do(t, "GET", "/events", "")
	events := got["events"].(map[string]any)
	require.Equal(t, count["count"], events["total"], "the overview's total is the count: %v", got)
	var sum float64
	for _, k := range []string{"pending", "processing", "queued", "processed", "failed"} {
		sum += events[k].(float64)
	}
	require.Equal(t, events["total"], sum, "the total is the sum of the states")
	_, err := time.Parse(time.RFC3339Nano, got["time"].(string))
	require.NoError(t, err)
	return got
}

// The overview counts the events by state exactly, before and after folds, and across retries of
// folded failed tasks (one, and a reference's at once).
func TestOverviewIsExact(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	hook := &switchHook{}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)
	counts := func(got map[string]any) [5]float64 {
		e := got["events"].(map[string]any)
		return [5]float64{e["pending"].(float64), e["processing"].(float64), e["queued"].(float64), e["processed"].(float64), e["failed"].(float64)}
	}

	got := overview(t, b)
	require.Equal(t, [5]float64{}, counts(got))
	require.Nil(t, got["oldestWaitingSeconds"], "nothing waits")
	require.EqualValues(t, 0, got["waiting"])

	hook.fail.Store(true)
	for i := range 3 {
		createTask(t, b, fmt.Sprintf(`{"url": "%s", "payload": %d, "referenceId": "r"}`, recv.URL, i))
	}
	alone := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 9}`)
	for range 2 {
		b.do(t, "POST", "/events", "")
	}
	failPlain(t, b)
	_, err := b.store.DB.Pool().Exec("UPDATE events SET created_at = NOW(6) - INTERVAL 90 SECOND WHERE id = ?", alone)
	require.NoError(t, err)
	got = overview(t, b)
	require.Equal(t, [5]float64{2, 0, 2, 2, 1}, counts(got), "%v", got)
	require.EqualValues(t, 2, got["waiting"])
	require.GreaterOrEqual(t, got["oldestWaitingSeconds"], 90.0)

	deliverAll(t, b.store)
	require.Equal(t, [5]float64{0, 0, 0, 2, 5}, counts(overview(t, b)))
	fold(t, b)
	require.Equal(t, [5]float64{0, 0, 0, 2, 5}, counts(overview(t, b)), "the same once folded")

	// A retry of one folded failed task, then of the reference's: open again, and counted once.
	hook.fail.Store(false)
	status, _, _ := b.do(t, "POST", "/events/"+jsonID(alone)+"/retry", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, [5]float64{1, 0, 0, 2, 4}, counts(overview(t, b)))
	status, _, _ = b.do(t, "POST", "/references/r/retry", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, [5]float64{2, 0, 2, 2, 1}, counts(overview(t, b)))
	deliverAll(t, b.store)
	require.Equal(t, [5]float64{0, 0, 0, 6, 1}, counts(overview(t, b)))
	fold(t, b)
	require.Equal(t, [5]float64{0, 0, 0, 6, 1}, counts(overview(t, b)))
}
