package pagestore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/stretchr/testify/require"
)

// countingArchive counts the GETs of page objects and calls afterFirst once, after the first one
// returned.
type countingArchive struct {
	pagestore.Archive
	mu         sync.Mutex
	gets       int
	afterFirst func()
}

func (c *countingArchive) GetPage(ctx context.Context, page int64, fresh bool) ([]byte, bool, error) {
	obj, ok, err := c.Archive.GetPage(ctx, page, fresh)
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
