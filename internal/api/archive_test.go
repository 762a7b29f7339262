package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// GET /events/{id} of an event moved to the archive answers as it did from `events`,
// over real HTTP against the real S3 protocol; with the archive's endpoint down it is a 503 that
// names no internal detail, and an event of the window still answers.
func TestAnArchivedEventOverHTTP(t *testing.T) {
	t.Parallel()
	b, s3srv, id, before := archivedEvent(t, nil)
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

// archivedEvent serves the API over real HTTP with an archive in a bucket of a local S3 endpoint
// of its own (with no cache, so that every read of an archived event is a GET), logging to log
// (nil: slog's default), and creates an event that it folds,
// packs and moves to the bucket with a window of 0: its id, and GET /events/{id}'s answer before
// the move.
func archivedEvent(t *testing.T, log *slog.Logger) (b *testBundle, s3srv *locals3.Server, id string, before map[string]any) {
	t.Helper()
	ctx := context.Background()
	s3srv, err := locals3.Start("", "", "history")
	require.NoError(t, err)
	t.Cleanup(s3srv.Stop)
	bucket := archive.New(locals3.NewClient(s3srv.URL), "history", -1)
	bucket.Timeout = time.Second
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4)).WithArchive(bucket)
	b = &testBundle{store: store, srv: openapitest.NewServer(t, &api.Server{Stores: store.API(), Logger: log})}

	status, created, _ := b.do(t, "POST", "/events", "")
	require.Equal(t, http.StatusCreated, status)
	id = jsonID(int64(created["id"].(float64)))
	_, before, _ = b.do(t, "GET", "/events/"+id, "")

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
	return b, s3srv, id, before
}

// An S3 endpoint that stops answering (stopped with SIGSTOP: connections are accepted, nothing
// answers) makes a read of an archived event a 503 with Retry-After within the archive's Timeout,
// as an endpoint that is down does, not a request that waits until the caller (or, on AWS, the
// function's timeout) gives up; the endpoint resumed, the event reads again.
func TestAnArchivedEventWhileS3Stalls(t *testing.T) {
	t.Parallel()
	b, s3srv, id, before := archivedEvent(t, nil)
	require.NoError(t, s3srv.Pause())
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, s3srv.Resume())
		}
	}
	t.Cleanup(resume)
	type answer struct {
		status int
		body   map[string]any
		hdr    http.Header
	}
	got := make(chan answer, 1)
	start := time.Now()
	go func() {
		status, body, hdr := b.do(t, "GET", "/events/"+id, "")
		got <- answer{status, body, hdr}
	}()
	select {
	case a := <-got:
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%v", a.body)
		require.Equal(t, "the history's archive is unavailable; try again", a.body["error"])
		require.Equal(t, "1", a.hdr.Get("Retry-After"))
		require.Less(t, time.Since(start), 10*time.Second, "answered within the archive's Timeout (1 s), and some")
	case <-time.After(15 * time.Second):
		resume() // lets the request end
		t.Fatal("GET /events/{id} of an archived event still waits for the stalled S3 endpoint after 15 s (the archive's Timeout is 1 s)")
	}

	resume()
	status, after, _ := b.do(t, "GET", "/events/"+id, "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, before, after, "the endpoint resumed: the event reads again")
}

// A request its caller abandoned (a client's timeout: net/http cancels its context) while the
// archive stalls ends without a log line at ERROR, which is for what needs a person: nothing
// failed but the caller's patience. The same read that fails on its own (the archive's Timeout)
// is an ERROR.
func TestAnAbandonedReadIsNotAnError(t *testing.T) {
	t.Parallel()
	var logs testutil.Buffer
	b, s3srv, id, _ := archivedEvent(t, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, s3srv.Pause())
	t.Cleanup(func() { _ = s3srv.Resume() })

	impatient := &http.Client{Timeout: 200 * time.Millisecond}
	_, err := impatient.Get(b.srv.URL + "/events/" + id)
	require.Error(t, err, "the client gave up first")
	testutil.Eventually(t, 10*time.Second, "the abandoned request is logged", func() bool {
		return strings.Contains(logs.String(), "path=/events/"+id)
	})
	require.NotContains(t, logs.String(), "level=ERROR", "abandoned by its caller: %s", logs.String())

	status, _, _ := b.do(t, "GET", "/events/"+id, "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, logs.String(), "level=ERROR", "the archive's own timeout is an error")
}

// An id the archive cannot hold (its page is one the move never passed: the window's, or past the
// id counter) is a 404 with the archive's endpoint down, as with it up, not a 503: the move raises
// high_page past a page when it deletes its rows, so a page at or above it has every event in the
// database, and the read asks the bucket nothing. An archived event's page still needs the bucket
// (503), and so does an id of that page that names no event (the bucket may hold it).
func TestAnUnknownIDOfTheWindowIsNotFoundWhileS3IsDown(t *testing.T) {
	t.Parallel()
	b, s3srv, id, _ := archivedEvent(t, nil)
	archivedID, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err)
	s3srv.Stop()
	// The move passed the archived event's page only: the next page is the window's (the id
	// counter is 30,000 past the event), the one after it past the counter.
	next := (archivedID/10000 + 1) * 10000
	for _, unknown := range []string{jsonID(next), jsonID(next + 9999), jsonID(next + 50000), "9223372036854775807"} {
		for _, req := range [][2]string{{"GET", "/events/" + unknown}, {"GET", "/events/" + unknown + "/attempts"},
			{"POST", "/events/" + unknown + "/retry"}} {
			status, body, _ := b.do(t, req[0], req[1], "")
			require.Equal(t, http.StatusNotFound, status, "%s %s: %v", req[0], req[1], body)
			require.Equal(t, "event "+unknown+" not found", body["error"], "%s %s", req[0], req[1])
		}
	}
	status, _, _ := b.do(t, "GET", "/events/"+id, "")
	require.Equal(t, http.StatusServiceUnavailable, status, "the archived event's page is in the bucket only")
	status, _, _ = b.do(t, "GET", "/events/"+jsonID(archivedID+1), "")
	require.Equal(t, http.StatusServiceUnavailable, status, "an id of an archived page may be in its object")
}

// An archived event whose page's object was deleted by hand (the bucket holding other pages) is a
// 503 with Retry-After and the archive's usual message, not a 404, and the failed read is logged
// once at ERROR naming the page and the bucket, for a person to restore the object; the processed
// listing that reaches the page is a 503 too, not a page without its events. Before, both answered
// as for a page without events (a 404, an empty listing).
func TestAnArchivedEventWhoseObjectWasDeletedIsA503(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs testutil.Buffer
	b, s3srv, id, _ := archivedEvent(t, slog.New(slog.NewTextHandler(&logs, nil)))
	client := locals3.NewClient(s3srv.URL)
	bucket := archive.New(client, "history", -1)
	// The bucket holds another page's object: this one's is not missing for want of any.
	require.NoError(t, bucket.PutPage(ctx, 7, pages.EncodeObject(7, &[pages.Columns][]byte{}), ""))
	_, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("history"), Key: aws.String(archive.Key(0))})
	require.NoError(t, err)

	status, body, hdr := b.do(t, "GET", "/events/"+id, "")
	require.Equal(t, http.StatusServiceUnavailable, status, "%v", body)
	require.Equal(t, "the history's archive is unavailable; try again", body["error"])
	require.Equal(t, "1", hdr.Get("Retry-After"))
	failed := errorLines(logs.String())
	require.Len(t, failed, 1, "one ERROR for the failed read: %s", logs.String())
	require.Contains(t, failed[0], "path=/events/"+id)
	require.Contains(t, failed[0], "page 0 of the history")
	require.Contains(t, failed[0], `bucket \"history\"`)

	archived, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err)
	status, body, hdr = b.do(t, "GET", "/events?state=processed&before="+jsonID(archived+1), "")
	require.Equal(t, http.StatusServiceUnavailable, status, "%v", body)
	require.Equal(t, "1", hdr.Get("Retry-After"))
}

// A page's object written by another database's archive (one bucket shared by two databases: its
// x-amz-meta-archive-id names another identity than this database's archive_id, migration 0038):
// a read of an event of the page is a 503 with Retry-After, and the process logs one ERROR naming
// the page, the bucket and both identities; never the other database's event as this one's.
func TestAnotherDatabasesObjectIsA503(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs testutil.Buffer
	b, s3srv, id, _ := archivedEvent(t, slog.New(slog.NewTextHandler(&logs, nil)))
	var mine string
	require.NoError(t, b.store.DB.Pool().QueryRowContext(ctx, "SELECT archive_id FROM history_archive").Scan(&mine))
	bucket := archive.New(locals3.NewClient(s3srv.URL), "history", -1)
	obj, version, ok, err := bucket.ReadObject(ctx, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, mine, obj.Owner, "the move wrote this database's identity")
	// The other database's object of page 0, in its place (events of the same ids, as a second
	// database's are).
	require.NoError(t, bucket.PutObject(ctx, 0, archive.Object{Bytes: obj.Bytes, Owner: "0b5e0c1a-other-database"}, version))

	status, body, hdr := b.do(t, "GET", "/events/"+id, "")
	require.Equal(t, http.StatusServiceUnavailable, status, "%v", body)
	require.Equal(t, "the history's archive is unavailable; try again", body["error"])
	require.Equal(t, "1", hdr.Get("Retry-After"))
	failed := errorLines(logs.String())
	require.Len(t, failed, 1, "one ERROR for the failed read: %s", logs.String())
	for _, want := range []string{"path=/events/" + id, "page 0 ", `bucket \"history\"`, "0b5e0c1a-other-database", mine} {
		require.Contains(t, failed[0], want)
	}
	archived, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err)
	status, body, hdr = b.do(t, "GET", "/events?state=processed&before="+jsonID(archived+1), "")
	require.Equal(t, http.StatusServiceUnavailable, status, "%v", body)
	require.Equal(t, "1", hdr.Get("Retry-After"))
}

// errorLines is the ERROR lines of a text log.
func errorLines(log string) []string {
	var failed []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=ERROR") {
			failed = append(failed, line)
		}
	}
	return failed
}
