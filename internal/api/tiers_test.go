package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/client"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every read that may touch the archive asks S3 only for a page the move has passed and that its
// answer needs: with the local S3 endpoint stopped (its process killed), an answer that needs no
// archived page is the normal answer, and one that does is a 503 with Retry-After.

// tiered is a history in three tiers, served over real HTTP, with ids placed by the literal
// allocator (each create takes the id counter plus one, so a test sets where the next id falls):
//
//	page 0 (archived): plain 1, 2, 3; task A0 of ref-a (4); task F of ref-f (5000: failed for good,
//	                   so still in `events`, its page's other events in the bucket); task G0 of
//	                   ref-g (5001, failed for good too); plain 9999
//	page 1 (archived): plain 10000 and 19999, the first and last ids of the page; task A1 (10001);
//	                   task G1 of ref-g (10002: delivered after G0 failed)
//	page 2 (archived): task A2 (20001); task B1 of ref-b (20006, created after B0)
//	page 3 (window):   plain 30001; task A3 (30002); task B0 of ref-b (30006)
//
// and the id counter at 40010, so that pages 0 to 2 move and page 3 stays.
type tiered struct {
	b        *testBundle
	s3       *locals3.Server
	ids      map[string]int64
	archived []int64 // the processed events of pages 0-2, newest first
	window   []int64 // the processed events of page 3, newest first
}

func newTiered(t *testing.T) *tiered {
	t.Helper()
	ctx := context.Background()
	s3srv, err := locals3.Start("", "", "history")
	require.NoError(t, err)
	t.Cleanup(s3srv.Stop)
	bucket := archive.New(locals3.NewClient(s3srv.URL), "history", -1) // no cache: every archived read is a GET
	bucket.Timeout = time.Second
	store := wire.NewStores(testdb.Core(t, mysql.Config{Allocator: mysql.AllocatorLiteral}, 4)).WithArchive(bucket)
	tr := &tiered{b: &testBundle{store: store, srv: openapitest.NewServer(t, &api.Server{Stores: store.API(), Webhook: webhook.Policy{AllowLoopback: true}})},
		s3: s3srv, ids: map[string]int64{}}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hook.Close)

	at := func(counter int64) {
		t.Helper()
		_, err := store.DB.Pool().Exec("UPDATE status SET id = ?", counter)
		require.NoError(t, err)
	}
	plain := func(name string) {
		t.Helper()
		status, got, _ := tr.b.do(t, "POST", "/events", "")
		require.Equal(t, http.StatusCreated, status, "%v", got)
		tr.ids[name] = int64(got["id"].(float64))
	}
	task := func(name, ref, path string) {
		t.Helper()
		status, got, _ := tr.b.do(t, "POST", "/events/async",
			fmt.Sprintf(`{"url": %q, "referenceId": %q, "maxRetries": 0}`, hook.URL+path, ref))
		require.Equal(t, http.StatusAccepted, status, "%v", got)
		tr.ids[name] = int64(got["id"].(float64))
	}
	plain("p1")
	plain("p2")
	plain("p3")
	task("A0", "ref-a", "/ok")
	at(4999)
	task("F", "ref-f", "/refuse")
	task("G0", "ref-g", "/refuse")
	at(9998)
	plain("last0")
	plain("first1")
	task("A1", "ref-a", "/ok")
	task("G1", "ref-g", "/ok")
	at(19998)
	plain("last1")
	at(20000)
	task("A2", "ref-a", "/ok")
	at(30000)
	plain("w")
	task("A3", "ref-a", "/ok")
	at(30005)
	task("B0", "ref-b", "/ok")
	at(20005)
	task("B1", "ref-b", "/ok")
	at(40010)
	require.Equal(t, map[string]int64{"p1": 1, "p2": 2, "p3": 3, "A0": 4, "F": 5000, "last0": 9999, "first1": 10000,
		"A1": 10001, "G0": 5001, "G1": 10002, "last1": 19999, "A2": 20001, "w": 30001, "A3": 30002, "B0": 30006, "B1": 20006}, tr.ids)

	deliverAll(t, store)
	_, err = store.Events.FoldSettled(ctx, 1000)
	require.NoError(t, err)
	for {
		units, _, err := store.Pages.PackPages(ctx, 1000, time.Hour)
		require.NoError(t, err)
		if units == 0 {
			break
		}
	}
	for {
		res, err := store.Pages.ArchivePages(ctx, 0, time.Minute)
		require.NoError(t, err)
		if res.Pages == 0 {
			break
		}
	}
	var pageRows, high int64
	require.NoError(t, store.DB.Pool().QueryRow("SELECT COUNT(*) FROM event_pages WHERE page < 3").Scan(&pageRows))
	require.NoError(t, store.DB.Pool().QueryRow("SELECT high_page FROM history_archive").Scan(&high))
	require.Zero(t, pageRows, "pages 0 to 2 are in the bucket only")
	require.EqualValues(t, 3, high, "the move passed pages 0 to 2, not the window's")
	tr.archived = []int64{20006, 20001, 19999, 10002, 10001, 10000, 9999, 4, 3, 2, 1}
	tr.window = []int64{30006, 30002, 30001}
	return tr
}

// tierRead is a request, and whether its answer needs an archived page.
type tierRead struct {
	method, path string
	needsS3      bool
}

// The reads of every route that may touch the archive, with the local S3 endpoint up and then
// stopped (its process killed): each answer that needs no archived page is the same, and each that
// needs one is a 503 with Retry-After and a message that names no address. Among them, the known
// defect: GET /events?state=processed&before=1 (no event has an id below 1) was a 503.
func TestEveryReadAsksS3OnlyForWhatItsAnswerNeeds(t *testing.T) {
	t.Parallel()
	tr := newTiered(t)
	reads := []tierRead{
		// By id: the window's, a failed task of an archived page (in `events`), unknown ids the
		// move never passed; and the archived page's first and last ids, and an id of it that names
		// no event (the bucket may hold it).
		{"GET", "/events/30001", false}, {"GET", "/events/30002", false}, {"GET", "/events/5000", false},
		{"GET", "/events/30003", false}, {"GET", "/events/40011", false},
		{"GET", "/events/1", true}, {"GET", "/events/4", true}, {"GET", "/events/9999", true},
		{"GET", "/events/10000", true}, {"GET", "/events/19999", true}, {"GET", "/events/20006", true},
		{"GET", "/events/10002", true},
		// The window's edge: 29999 is the last id of the last page the move passed (no event: the
		// bucket may hold one), 30000 the first of the window's page (no event, and none in the
		// bucket: a 404 without S3).
		{"GET", "/events/29999", true}, {"GET", "/events/30000", false},
		{"GET", "/events/29999/attempts", true}, {"GET", "/events/30000/attempts", false},
		{"POST", "/events/29999/retry", true}, {"POST", "/events/30000/retry", false},
		// The processed listing: below id 1 there is nothing; a page of the window's events whose
		// next event is archived (the probe for "more" is not the answer); pages that show archived
		// events.
		{"GET", "/events?state=processed&before=1", false},
		{"GET", "/events?state=processed&before=1&limit=1", false},
		{"GET", "/events?state=processed&before=1&kind=task", false},
		{"GET", "/events?state=processed&limit=2", false},
		{"GET", "/events?state=processed&limit=3", false},
		{"GET", "/events?state=processed&before=30002&limit=1", false},
		{"GET", "/events?state=processed&kind=task&limit=2", false},
		{"GET", "/events?state=processed&before=30006&limit=2", false},
		{"GET", "/events?state=processed", true},
		{"GET", "/events?state=processed&limit=4", true},
		{"GET", "/events?state=processed&before=30001&limit=1", true},
		{"GET", "/events?state=processed&before=10001", true},
		{"GET", "/events?state=processed&before=2&limit=1", true},
		{"GET", "/events?state=processed&before=30000&limit=1", true},
		{"GET", "/events?state=processed&before=20007&limit=1", true},
		{"GET", "/events?state=processed&before=30002&limit=2", true},
		{"GET", "/events?state=failed", false}, {"GET", "/events?state=pending", false},
		{"GET", "/events?state=queued", false},
		// Attempts: a failed task's, in `events` (also past its last attempt); a window task's; an
		// archived task's.
		{"GET", "/events/5000/attempts", false}, {"GET", "/events/5000/attempts?after=1", false},
		{"GET", "/events/5000/attempts?after=7&limit=3", false},
		{"GET", "/events/30002/attempts", false},
		{"GET", "/events/4/attempts", true}, {"GET", "/events/20006/attempts?after=0&limit=1", true},
		// A reference's listing: a page of window tasks whose next task is archived; the failed
		// task's reference; the last of ref-a's tasks; pages that show archived tasks.
		{"GET", "/references/ref-b/events?limit=1", false},
		{"GET", "/references/ref-f/events", false},
		{"GET", "/references/ref-a/events?after=20001", false},
		{"GET", "/references/ref-a/events?after=20001&limit=1", false},
		{"GET", "/references/ref-a/events?after=30002", false},
		{"GET", "/references/ref-unknown/events", false},
		{"GET", "/references/ref-g/events?limit=1", false}, {"GET", "/events/5001", false},
		{"GET", "/references/ref-g/events", true},
		{"GET", "/references/ref-a/events", true},
		{"GET", "/references/ref-a/events?limit=1", true},
		{"GET", "/references/ref-b/events?limit=2", true},
		{"GET", "/references/ref-b/events?after=30006", true},
		// Retries that change nothing: a reference whose tasks are all archived and delivered (none
		// failed), a processed task of the window; an archived task (is it a task? failed?) needs
		// its object.
		{"POST", "/references/ref-a/retry", false}, {"POST", "/references/ref-b/retry", false},
		{"POST", "/events/30002/retry", false}, {"POST", "/events/30001/retry", false},
		{"POST", "/events/40011/retry", false},
		{"POST", "/events/4/retry", true}, {"POST", "/events/10002/retry", true},
		// The counts and the tiers.
		{"GET", "/events", false}, {"GET", "/overview", false}, {"GET", "/history", false},
	}
	type answer struct {
		status int
		body   map[string]any
	}
	up := make([]answer, len(reads))
	for i, r := range reads {
		status, body, _ := tr.b.do(t, r.method, r.path, "")
		require.Less(t, status, 500, "%s %s with S3 up: %v", r.method, r.path, body)
		up[i] = answer{status, body}
	}
	tr.s3.Stop()
	for i, r := range reads {
		status, body, hdr := tr.b.do(t, r.method, r.path, "")
		if !r.needsS3 {
			if r.path == "/overview" || r.path == "/history" { // each says when it was read
				delete(body, "time")
				delete(up[i].body, "time")
			}
			assert.Equal(t, up[i], answer{status, body}, "%s %s needs no archived page: the normal answer with S3 down", r.method, r.path)
			continue
		}
		assert.Equal(t, http.StatusServiceUnavailable, status, "%s %s needs an archived page: %v", r.method, r.path, body)
		assert.Equal(t, "the history's archive is unavailable; try again", body["error"], "%s %s", r.method, r.path)
		assert.Equal(t, "1", hdr.Get("Retry-After"), "%s %s", r.method, r.path)
	}

	// The failed tasks of an archived page are retried, and read, with S3 down: F alone, and G0,
	// whose reference's later task (G1) was delivered and archived: it goes to the end of its
	// reference, by the directory and `events`, with no read of the bucket.
	status, body, _ := tr.b.do(t, "POST", "/references/ref-g/retry", "")
	require.Equal(t, http.StatusOK, status, "%v", body)
	require.Equal(t, []any{5001.0}, body["retried"], "%v", body)
	require.Equal(t, "end", body["placement"], "%v", body)
	status, body, _ = tr.b.do(t, "POST", "/references/ref-f/retry", "")
	require.Equal(t, http.StatusOK, status, "%v", body)
	require.Len(t, body["retried"], 1, "%v", body)
	status, body, _ = tr.b.do(t, "GET", "/events/5000", "")
	require.Equal(t, http.StatusOK, status, "%v", body)
	require.Equal(t, "pending", body["state"], "%v", body)
}

// slowProxy is a real slow S3 endpoint on loopback: a reverse proxy in front of target that holds
// each request for delay (or until its caller gives up) before it passes it on.
func slowProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
			rp.ServeHTTP(w, r)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// With S3 slow (every call answered, each inside the archive's own bound, but late), a read that
// needs many archived pages is bounded by the API's ReadTimeout, a 503 with Retry-After, not held
// for as many S3 calls as it makes (a reference's listing reads each archived task's page: up to
// 1,001 calls of up to 5 s each before); a read that needs one page is slow, and answers.
func TestAReadIsBoundedWhileS3IsSlow(t *testing.T) {
	t.Parallel()
	tr := newTiered(t)
	// The margins are seconds, not milliseconds, so that a loaded machine's slower database reads
	// change no outcome: a read of one page has 1.5 s beside its S3 call before the ReadTimeout, and
	// the bounded read 2.5 s beside the ReadTimeout before it would take three calls' time.
	const delay = 2 * time.Second
	const readTimeout = 3500 * time.Millisecond
	slow := archive.New(locals3.NewClient(slowProxy(t, tr.s3.URL, delay)), "history", -1)
	slow.Timeout = 5 * time.Second // each call answers inside its own bound
	store := wire.NewStores(tr.b.store.DB).WithArchive(slow)
	b := &testBundle{store: store, srv: openapitest.NewServer(t, &api.Server{Stores: store.API(), ReadTimeout: readTimeout})}

	_, want, _ := tr.b.do(t, "GET", "/events/4", "")
	start := time.Now()
	status, got, _ := b.do(t, "GET", "/events/4", "")
	require.Equal(t, http.StatusOK, status, "one archived page, %s late: %v", delay, got)
	require.Equal(t, want, got)
	require.GreaterOrEqual(t, time.Since(start), delay, "through the slow endpoint")

	// ref-a's first three tasks are on three archived pages: three calls of 2 s.
	start = time.Now()
	status, got, hdr := b.do(t, "GET", "/references/ref-a/events", "")
	took := time.Since(start)
	require.Equal(t, http.StatusServiceUnavailable, status, "after %s: %v", took, got)
	require.Equal(t, "the history's archive is unavailable; try again", got["error"])
	require.Equal(t, "1", hdr.Get("Retry-After"))
	require.Less(t, took, 3*delay-500*time.Millisecond, "bounded by the ReadTimeout (3.5 s), not by three calls of 2 s")
}

// Paging with the Go client over a listing that spans the database and the archive gives every
// event once, in order, with no gap, whatever the page's size: the processed listing (newest
// first, every kind and tasks only) and each reference's tasks (in delivery order). With S3 down,
// the pages that need no archived page are the same, and the first that needs one is the
// client's *Error: a 503 with its Retry-After.
func TestTheGoClientPagesAcrossTheTiers(t *testing.T) {
	t.Parallel()
	tr := newTiered(t)
	ctx := context.Background()
	c, err := client.New(tr.b.srv.URL, client.Options{Retry: client.Retry{MaxAttempts: 1}})
	require.NoError(t, err)
	list := func(kind string, limit int) ([]int64, []client.EventPage, error) {
		var ids []int64
		var pages []client.EventPage
		opt := client.ListOptions{State: "processed", Kind: kind, Limit: limit}
		for range 100 {
			page, err := c.ListEvents(ctx, opt)
			if err != nil {
				return ids, pages, err
			}
			pages = append(pages, page)
			for _, e := range page.Events {
				ids = append(ids, e.ID())
			}
			if page.Next == nil {
				return ids, pages, nil
			}
			opt.Before = *page.Next
		}
		t.Fatalf("the listing of %q by %d did not end", kind, limit)
		return nil, nil, nil
	}
	refs := func(ref string, limit int) []int64 {
		var ids []int64
		var after int64
		for range 100 {
			page, err := c.ReferenceTasks(ctx, ref, after, limit)
			require.NoError(t, err)
			for _, e := range page.Events {
				ids = append(ids, e.ID)
			}
			if page.Next == nil {
				return ids
			}
			after = *page.Next
		}
		t.Fatalf("the listing of %s by %d did not end", ref, limit)
		return nil
	}
	all := append(append([]int64{}, tr.window...), tr.archived...)
	tasks := []int64{30006, 30002, 20006, 20001, 10002, 10001, 4}
	byLimit := map[int][]client.EventPage{}
	for _, limit := range []int{1, 2, 3, 4, 7, 50, 100} {
		ids, pages, err := list("", limit)
		require.NoError(t, err)
		require.Equal(t, all, ids, "every processed event once, newest first, by %d", limit)
		byLimit[limit] = pages
		ids, _, err = list("task", limit)
		require.NoError(t, err)
		require.Equal(t, tasks, ids, "every processed task once, newest first, by %d", limit)
		require.Equal(t, []int64{4, 10001, 20001, 30002}, refs("ref-a", limit), "ref-a by %d", limit)
		require.Equal(t, []int64{30006, 20006}, refs("ref-b", limit), "ref-b by %d (B1 was created after B0)", limit)
	}

	tr.s3.Stop()
	// By 1 and by 3, the window's three events are whole pages; by 2, the second page would hold
	// 30001 and the archived 20006.
	for limit, shown := range map[int]int{1: 3, 2: 2, 3: 3} {
		ids, pages, err := list("", limit)
		require.Equal(t, tr.window[:shown], ids, "the window's events, by %d", limit)
		require.Equal(t, byLimit[limit][:len(pages)], pages, "the same pages as with S3 up, by %d", limit)
		var e *client.Error
		require.ErrorAs(t, err, &e, "by %d", limit)
		require.Equal(t, http.StatusServiceUnavailable, e.Status)
		require.Equal(t, time.Second, e.RetryAfter)
		require.Equal(t, "the history's archive is unavailable; try again", e.Message)
	}
}
