package mysql_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/stretchr/testify/require"
)

// The API's user can run the operators' reads (the listing by state, the overview, the history's
// tiers) and the bulk
// retry of a reference's failed tasks, folded ones included, with the grants it has: no new
// privilege.
func TestAPIUserRunsTheConsoleReadsAndTheBulkRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, admin := migratedWithUsers(t,
		mysql.FunctionUser{Role: mysql.RoleAPI, Name: "eo_api", Password: "api-secret"},
		mysql.FunctionUser{Role: mysql.RoleSweeper, Name: "eo_sweeper", Password: "sweeper-secret"},
	)
	api := openAs(t, dsn("eo_api", "api-secret"), mysql.Config{})
	sweeper := openAs(t, dsn("eo_sweeper", "sweeper-secret"), mysql.Config{})

	created, err := api.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{
		{URL: "https://example.com/a", Payload: []byte("1"), ReferenceID: "r", MaxRetries: 1},
		{URL: "https://example.com/a", Payload: []byte("2"), ReferenceID: "r", MaxRetries: 1},
	})
	require.NoError(t, err)
	// Both failed, as deliveries would leave them (set by hand: the deliveries are not this test's),
	// then folded by the sweeper.
	_, err = admin.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1 WHERE id IN (?, ?)", created[0].ID, created[1].ID)
	require.NoError(t, err)
	_, err = sweeper.Events.FoldSettled(ctx, 10)
	require.NoError(t, err)

	failed, _, err := api.Events.ListEvents(ctx, "failed", exactlyonce.KindTask, 0, 10)
	require.NoError(t, err, "the API lists the failed tasks")
	require.Len(t, failed, 2)
	o, err := api.Events.Overview(ctx)
	require.NoError(t, err, "the API reads the overview")
	require.EqualValues(t, 2, o.Failed)
	done, err := api.Tasks.RetryReference(ctx, "r")
	require.NoError(t, err, "the API retries a reference's failed tasks")
	require.Equal(t, []int64{created[0].ID, created[1].ID}, done.IDs)
	o, err = api.Events.Overview(ctx)
	require.NoError(t, err)
	require.Equal(t, [3]int64{1, 1, 0}, [3]int64{o.Pending, o.Queued, o.Failed})
	n, err := api.Events.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, o.Total, n)
	tiers, err := api.Events.HistoryTiers(ctx)
	require.NoError(t, err, "the API reads the history's tiers (event_pages is visible to it in information_schema)")
	require.Equal(t, n, tiers.Total)
}
