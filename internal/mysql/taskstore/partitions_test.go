package taskstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// The retries' statements that name the folded states (30, 40) read the failed events, folded or
// not, and never the processed history (`settled`); the in-place retry's check reads `open` alone.
func TestStatementsNamingFoldedStatesArePruned(t *testing.T) {
	t.Parallel()
	db := testdb.Core(t, mysql.Config{}, 2)
	literal := func(q string) string {
		q = strings.ReplaceAll(q, "/*ids*/", "1, 2, 3")
		q = strings.ReplaceAll(q, "/*slots*/", "1")
		return strings.ReplaceAll(q, "?", "1")
	}
	for _, c := range []struct {
		q    string
		want []string
	}{
		{taskstore.Queries.LockFailedTask, []string{"failed", "fresh"}},
		{taskstore.Queries.RetryTask, []string{"failed", "fresh"}},
		// And `queued`, for the frontier a retry to the end behind an open task holds.
		{taskstore.RetryQueries.RetryStateOfReference, []string{"failed", "fresh", "open", "queued"}},
		// A frontier by id: `open` and `queued` only, never the history.
		{taskstore.RetryQueries.LockFrontier, []string{"open", "queued"}},
		{taskstore.RetryQueries.FrontierOf, []string{"open", "queued"}},
		{taskstore.RetryQueries.HoldRetried, []string{"open", "queued"}},
		{taskstore.RetryQueries.ReleaseRetried, []string{"open", "queued"}},
		{taskstore.Queries.LockFailedTasks, []string{"failed", "fresh"}},
		// The in-place retry's check under the bucket: `open` and one row of the directory.
		{strings.Replace(taskstore.RetryQueries.RetryInPlaceCheck, "/*column*/", "d0", 1), []string{"open", "p1"}},
		// The directory's reads and its log's compaction: the slot's partitions.
		{strings.Replace(taskstore.DirQueries.ReadDirectoryEntries, "/*column*/", "d0", 1), []string{"p1"}},
		{taskstore.DirQueries.SlotLog, []string{"p1"}},
		{taskstore.DirQueries.DeleteSlotLog, []string{"p1"}},
	} {
		got, err := mysqltest.PartitionsOf(context.Background(), db.Pool(), literal(c.q))
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%.60s", c.q)
	}
}
