package pagestore_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/stretchr/testify/require"
)

// Invariant: a lost id counter row is re-created above every id in use, the archived ones too. A
// history whose pages have all moved to the archive has no event in `events` and no page row left
// to say how far its ids went: the move leaves the id counter's page and the one below it, so this
// needs the counter a page (10,000 ids) or more past the last event (ids handed out and never
// used: blocks of processes that died, or a counter re-seeded once already, 2^20 above the
// largest id), and an idle system past its retention. The migration must count the pages the
// move passed (history_archive's high_page). Before, it re-seeded the counter at 2^20 above
// nothing: 1,048,576, below the archived ids of a history past a million events (here 3,000,001
// to 3,000,300), which it would have handed out again.
func TestALostCounterIsReseededAboveTheArchivedPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newArchived(t)
	// The ids of a history of three million events.
	_, err := h.db.Exec("UPDATE status SET id = 3000000")
	require.NoError(t, err)
	createProcessed(t, h.store, 300)
	foldAll(t, h.store)
	packAll(t, h.store)
	require.Positive(t, moveAll(t, ctx, h.store, 0).Pages)
	var inEvents int
	require.NoError(t, h.db.QueryRow("SELECT COUNT(*) FROM events").Scan(&inEvents))
	rows, _, err := mysqltest.PageRowCounts(ctx, h.db)
	require.NoError(t, err)
	require.Zero(t, inEvents+int(rows), "every event is archived: none in events, no page row")
	audit, err := mysqltest.AuditArchived(ctx, h.db, h.client)
	require.NoError(t, err)
	require.Len(t, audit, 300)
	var highest int64
	for _, a := range audit {
		highest = max(highest, a.ID)
	}

	_, err = h.db.Exec("DELETE FROM status")
	require.NoError(t, err)
	require.NoError(t, mysql.Migrate(ctx, h.db))
	var counter int64
	require.NoError(t, h.db.QueryRow("SELECT id FROM status").Scan(&counter))
	require.Greater(t, counter, highest, "the counter is re-created above every archived id")
	e, err := h.store.Events.CreateProcessed(ctx, "after")
	require.NoError(t, err)
	require.Greater(t, e.ID, highest, "a new event never takes an archived event's id")
}
