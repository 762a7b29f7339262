package pagestore_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/stretchr/testify/require"
)

// Invariant: a lost id counter row is re-created above every id in use, the archived ones too. A
// history whose pages have all moved to the archive (an idle system past its retention, the last
// events' units packed because blocks of ids handed out to processes that died left the counter
// far ahead) has no event in `events` and no page row: the migration must count the pages the
// move passed (history_archive's high_page). Before, it re-seeded the counter at CounterSeedGap
// (2^20) above nothing, below the archived ids of a history past a million events, which it
// would then hand out again.
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
