package mysql_test

import (
	"context"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/counterstore"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/stretchr/testify/require"
)

// The counter function's user can apply counter messages and mark notifications published, and
// nothing else; the sweeper's can run the counter sweep; the API's can read the counts.
func TestCounterUserHasOnlyItsPrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, _ := migratedWithUsers(t,
		mysql.FunctionUser{Role: mysql.RoleCounter, Name: "eo_counter", Password: "counter-secret"},
		mysql.FunctionUser{Role: mysql.RoleSweeper, Name: "eo_sweeper", Password: "sweeper-secret"},
		mysql.FunctionUser{Role: mysql.RoleAPI, Name: "eo_api", Password: "api-secret"},
	)

	counter := openAs(t, dsn("eo_counter", "counter-secret"), mysql.Config{})
	rs, err := counter.Counters.ApplyCounterMessages(ctx, []exactlyonce.CounterMessage{
		{EntityID: "a", EntityType: "t", UserID: "u", Action: "added"},
		{EntityID: "b", EntityType: "t", UserID: "u", Action: "added"},
		{EntityID: "b", EntityType: "t", UserID: "u", Action: "readed"},
	})
	require.NoError(t, err)
	rs2, err := counter.Counters.ApplyCounterMessages(ctx, []exactlyonce.CounterMessage{{EntityID: "c", EntityType: "t", UserID: "u", Action: "added"}})
	require.NoError(t, err)
	require.NoError(t, counter.Counters.MarkCounterPublished(ctx, []string{rs[0].ID}))
	for _, stmt := range []string{
		"DELETE FROM t_counter", "UPDATE t_counter SET at = NOW()", "SELECT * FROM t_counter",
		"DELETE FROM t_counter_sum", "DELETE FROM counter_notifications", "INSERT INTO counter_buckets VALUES (0, 0)", "DELETE FROM counter_directories",
		"DELETE FROM counter_buckets", "SELECT * FROM events", "DROP TABLE t_counter",
	} {
		requireDenied(t, counter.DB.Pool(), stmt)
	}

	sweeper := openAs(t, dsn("eo_sweeper", "sweeper-secret"), mysql.Config{})
	pub := &recordingPublisher{}
	res := sweeping.SweepCounters(ctx, sweeper.Counters, sweeping.Counters{Publisher: pub, RepublishAfter: -1,
		SampleBuckets: counterstore.CounterBuckets}, nil)
	require.Zero(t, res.Errors)
	require.Equal(t, len(rs)+len(rs2)-1, res.Republished)
	require.Equal(t, 1, res.Checked)
	for _, stmt := range []string{"INSERT INTO t_counter_sum VALUES (0, 't', 'u', 0, 0, NOW())", "UPDATE counter_buckets SET version = 0"} {
		requireDenied(t, sweeper.DB.Pool(), stmt)
	}

	api := openAs(t, dsn("eo_api", "api-secret"), mysql.Config{})
	v, err := api.Counters.CounterSum(ctx, exactlyonce.CounterKey{EntityType: "t", UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.CounterSum{Sum: 2, Version: 4}, v)
	requireDenied(t, api.DB.Pool(), "UPDATE t_counter_sum SET sum = 0")
}

type recordingPublisher struct{ n int }

func (p *recordingPublisher) Publish(_ context.Context, ns []counters.Notification) ([]string, error) {
	var ids []string
	for _, n := range ns {
		ids = append(ids, n.ID)
	}
	p.n += len(ns)
	return ids, nil
}
