package pagestore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// countingArchive counts the GETs of page objects and the listings of the bucket (HoldsPages), and
// calls afterFirst once, after the first GET returned.
type countingArchive struct {
	pagestore.Archive
	mu         sync.Mutex
	gets       int
	lists      int
	afterFirst func()
}

func (c *countingArchive) HoldsPages(ctx context.Context) (bool, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.Archive.HoldsPages(ctx)
}

func (c *countingArchive) GetObject(ctx context.Context, page int64, fresh bool) (archive.Object, bool, error) {
	obj, ok, err := c.Archive.GetObject(ctx, page, fresh)
	c.mu.Lock()
	c.gets++
	hook := c.afterFirst
	c.afterFirst = nil
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	return obj, ok, err
}

// One request of the processed listing reads an archived page's object once, not once a span of
// columns it walks (before: ten GETs of one object for this page), and still loses nothing to a
// move that deletes page rows between two of its spans: here a late event's row of the archived
// page, moved into the object right after the listing read the object the first time. The listing
// sees the move by archived_events and reads the object again (without that check, the object
// read first, which lacks the late event, is used for every span, and the late event is missing).
func TestTheListingReadsAnArchivedPageOnceAndMissesNoMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	createProcessed(t, h.store, 1400)
	var late int64 // an id taken by a create that inserts late, below the last 50 events
	require.NoError(t, h.db.QueryRow("SELECT id + 1 FROM status").Scan(&late))
	_, err := h.db.Exec("UPDATE status SET id = id + 10")
	require.NoError(t, err)
	top := createProcessed(t, h.store, 50)
	require.Less(t, top[len(top)-1], int64(10000), "all on page 0")
	foldAll(t, h.store)
	packAll(t, h.store)
	require.EqualValues(t, 1, moveAll(t, ctx, h.store, 0).Pages)
	lateEvent(t, h.store, late, fmt.Sprintf("late-%d", late))
	require.Equal(t, 1, pageRows(t, h.db, 0), "the late event's row, on the archived page")

	ca := &countingArchive{Archive: h.client}
	ca.afterFirst = func() { require.EqualValues(t, 1, moveAll(t, ctx, h.store, 0).Pages) }
	h.store.WithArchive(ca)
	events, _, err := h.store.Events.ListEvents(ctx, "processed", "", 10000, 100)
	require.NoError(t, err)
	require.Equal(t, 0, pageRows(t, h.db, 0), "the move ran inside the listing")
	ids := map[int64]bool{}
	for i, e := range events {
		require.False(t, ids[e.ID], "event %d listed twice", e.ID)
		ids[e.ID] = true
		if i > 0 {
			require.Less(t, e.ID, events[i-1].ID, "newest first")
		}
	}
	require.Len(t, events, 100)
	require.True(t, ids[late], "the late event, moved from its row to the object between two spans, is listed")
	require.Equal(t, 2, ca.gets, "the object once, and once more after the move changed it")
}

// A page of a reference's listing reads tasks from at most 32 archived pages (a GET of each page's
// object) and ends there, saying more follow, so that its cost is bounded by what it returns, not
// by the limit asked: here 40 tasks on 40 archived pages, listed by 1,000, were 40 GETs in one
// request (1,000 tasks on 1,000 pages were 1,000, past the API's ReadTimeout). Paged, every task
// is listed once, in order.
func TestAReferencePageReadsABoundedNumberOfArchivedPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdb.DB(t, 8)
	store, err := wire.StoresOn(db, mysql.Config{Allocator: mysql.AllocatorLiteral})
	require.NoError(t, err)
	client := locals3.Client(t)
	ca := &countingArchive{Archive: archive.New(client, locals3.Bucket(t, client), -1)}
	store.WithArchive(ca)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(hook.Close)
	const n = 40
	var ids []int64
	for p := range n {
		_, err := db.Exec("UPDATE status SET id = ?", p*10000)
		require.NoError(t, err)
		got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: hook.URL, Payload: []byte(`{}`), ReferenceID: "many", MaxRetries: 0}})
		require.NoError(t, err)
		ids = append(ids, got[0].ID)
	}
	engine := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Tasks: &processing.Tasks{
		Deliverer: webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: 5 * time.Second})}}
	for delivered := 0; delivered < n; {
		b, err := engine.ProcessDue(ctx, 0, 100)
		require.NoError(t, err)
		require.NotZero(t, b.Claimed, "every task delivered at its first attempt")
		delivered += b.Settled
	}
	foldAll(t, store)
	packAll(t, store)
	require.EqualValues(t, n, moveAll(t, ctx, store, 0).Pages)

	var listed []int64
	var after int64
	for _, want := range []struct {
		tasks, gets int
		more        bool
	}{{32, 32, true}, {8, 40, false}} {
		got, more, err := store.Tasks.ReferencePage(ctx, "many", after, 1000)
		require.NoError(t, err)
		require.Len(t, got, want.tasks)
		require.Equal(t, want.more, more)
		require.Equal(t, want.gets, ca.gets, "a GET an archived page, at most 32 a page")
		for _, e := range got {
			listed = append(listed, e.ID)
		}
		after = got[len(got)-1].ID
	}
	require.Equal(t, ids, listed, "every task once, in order")
}
