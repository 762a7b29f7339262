package pagestore_test

// The archive tests' shared set-up: stores archiving to a bucket of their own, the history they
// load, and the helpers that move, pack and check it.

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

type archived struct {
	store  *wire.Stores
	db     *sql.DB
	dsn    string
	client *archive.Bucket
	bucket string
}

// newArchived returns stores on a fresh database, with an archive identity of its own, that archive
// to a fresh bucket.
func newArchived(t *testing.T) archived {
	t.Helper()
	db, dsn := testdb.DB(t, 8)
	// Its own archive identity, as migration 0038 draws one per database: the test pool's databases
	// are copies of one migrated template, rows included.
	_, err := db.Exec("UPDATE history_archive SET archive_id = UUID()")
	require.NoError(t, err)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	client := locals3.Client(t)
	bucket := locals3.Bucket(t, client)
	a := archive.New(client, bucket, 0)
	store.WithArchive(a)
	return archived{store: store, db: db, dsn: dsn, client: a, bucket: bucket}
}

// readers is every answer the readers give of a history, to compare before and after a move.
type readers struct {
	events   map[int64]exactlyonce.Event
	attempts map[int64][]exactlyonce.Attempt
	listed   []int64
	count    int64
}

func readAll(t *testing.T, store *wire.Stores, upTo int64, tasks []int64) readers {
	t.Helper()
	ctx := context.Background()
	r := readers{events: map[int64]exactlyonce.Event{}, attempts: map[int64][]exactlyonce.Attempt{}}
	for id := int64(1); id <= upTo; id++ {
		e, err := store.Events.Get(ctx, id)
		if exactlyonce.ErrorCode(err) == exactlyonce.ENOTFOUND {
			continue
		}
		require.NoError(t, err, id)
		e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Microsecond)
		if e.ProcessedAt != nil {
			p := e.ProcessedAt.UTC().Truncate(time.Microsecond)
			e.ProcessedAt = &p
		}
		r.events[id] = e
	}
	for _, id := range tasks {
		a, err := store.Tasks.Attempts(ctx, id)
		require.NoError(t, err)
		for i := range a {
			a[i].Started = a[i].Started.UTC().Truncate(time.Microsecond)
		}
		r.attempts[id] = a
	}
	r.listed = listAll(t, store, "", 100)
	var err error
	r.count, err = store.Events.Count(ctx)
	require.NoError(t, err)
	return r
}

// history creates processed events and tasks (delivered on their second attempt, and one that fails
// for good), folds them, and hands ids out past their pages, so that they can all be packed.
func history(t *testing.T, store *wire.Stores, plain int) (tasks []int64, failed int64) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen[r.Header.Get("webhook-id")]++
		switch {
		case strings.Contains(r.URL.Path, "refuse"):
			w.WriteHeader(http.StatusBadRequest)
		case seen[r.Header.Get("webhook-id")] == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(srv.Close)
	engine := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Works: fixedWorks(false), Tasks: &processing.Tasks{
		Deliverer: webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: 5 * time.Second}),
		RetryBase: time.Millisecond, RetryMax: 2 * time.Millisecond}}
	createProcessed(t, store, plain/2)
	batch := []exactlyonce.NewTask{{URL: srv.URL + "/refuse", Payload: []byte(`{}`), ReferenceID: "ref-f", MaxRetries: 3}}
	for i := range 20 {
		batch = append(batch, exactlyonce.NewTask{URL: srv.URL + "/ok", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), ReferenceID: fmt.Sprintf("ref-%d", i%3), MaxRetries: 3})
	}
	got, err := store.Tasks.CreateTasks(ctx, batch)
	require.NoError(t, err)
	for _, c := range got {
		tasks = append(tasks, c.ID)
	}
	require.Eventually(t, func() bool {
		b, err := engine.ProcessDue(ctx, 0, 100)
		require.NoError(t, err)
		var open int
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM events WHERE state < 10").Scan(&open))
		return b.Claimed == 0 && open == 0
	}, 30*time.Second, 5*time.Millisecond)
	createProcessed(t, store, plain-plain/2)
	foldAll(t, store)
	return tasks, tasks[0]
}

// packAll packs everything, after handing ids out past the history's pages.
func packAll(t *testing.T, store *wire.Stores) {
	t.Helper()
	_, err := store.DB.Pool().Exec("UPDATE status SET id = id + 30000")
	require.NoError(t, err)
	for {
		units, _, err := store.Pages.PackPages(context.Background(), 1000, time.Hour)
		require.NoError(t, err)
		if units == 0 {
			return
		}
	}
}

// moveAll runs the move until it moves nothing more, and returns what it moved.
func moveAll(t *testing.T, ctx context.Context, store *wire.Stores, retention time.Duration) pagestore.ArchiveResult {
	t.Helper()
	var all pagestore.ArchiveResult
	for range 100 {
		res, err := store.Pages.ArchivePages(ctx, retention, time.Minute)
		require.NoError(t, err)
		if res.Pages == 0 {
			return all
		}
		all.Pages += res.Pages
		all.Events += res.Events
	}
	t.Fatal("the move did not end")
	return all
}

// requireTiersAddUp checks that GET /history's tiers hold the count's events, each once: the
// events of `events`, of the page rows and of the archive add up to GET /events, and the page
// rows' events are what the page rows hold (mysqltest.PageRowCounts scans them).
func requireTiersAddUp(t *testing.T, store *wire.Stores) exactlyonce.HistoryTiers {
	t.Helper()
	ctx := context.Background()
	tiers, err := store.Events.HistoryTiers(ctx)
	require.NoError(t, err)
	require.NotNil(t, tiers.Archive, "an archive is configured: its tier is shown")
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, n, tiers.Total)
	require.Equal(t, n, tiers.EventRows+tiers.PagedEvents+tiers.Archive.Events, "%+v", tiers)
	_, paged, err := mysqltest.PageRowCounts(ctx, store.DB.Pool())
	require.NoError(t, err)
	require.Equal(t, paged, tiers.PagedEvents, "the page rows' events, as the page rows hold them")
	return tiers
}

// lateEvent inserts a processed event with id (a create that took its id long before it inserted),
// folds it and packs it: into its unit's columns if its page has a row, else into a new row.
func lateEvent(t *testing.T, store *wire.Stores, id int64, value string) {
	t.Helper()
	ctx := context.Background()
	_, err := store.DB.Pool().ExecContext(ctx, "INSERT INTO events (id, routing_hash, value, state, created_at, processed_at, processed_by, process_count) "+
		"VALUES (?, 0, ?, 10, NOW(6), NOW(6), 'api', 1)", id, value)
	require.NoError(t, err)
	foldAll(t, store)
	_, packed, err := store.Pages.PackPages(ctx, 100, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, packed)
}

func pageRows(t *testing.T, db *sql.DB, page int64) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM event_pages WHERE page = ?", page).Scan(&n))
	return n
}
