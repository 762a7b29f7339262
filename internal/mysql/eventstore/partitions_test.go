package eventstore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// partitionsOf returns the partitions (not subpartitions) EXPLAIN says q reads, sorted, each once.
func partitionsOf(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	out, err := mysqltest.PartitionsOf(context.Background(), db, q)
	require.NoError(t, err)
	return out
}

// Every statement that names the folded states (30, 40), and the operators' reads, are pruned as
// their comments say: none of them reads the processed history (`settled`) but the processed
// listing, which reads what is not packed yet of it.
func TestStatementsNamingFoldedStatesArePruned(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	literal := func(q string) string {
		q = strings.ReplaceAll(q, "/*ids*/", "1, 2, 3")
		q = strings.ReplaceAll(q, "/*units*/", "1, 2")
		return strings.ReplaceAll(q, "?", "1")
	}
	for _, c := range []struct {
		q    string
		want []string
	}{
		{eventstore.Queries.CountUnfolded, []string{"fresh", "open", "queued"}},
		{eventstore.Queries.FoldSettled, []string{"fresh"}},
		{eventstore.Queries.OverviewCounts, []string{"failed", "fresh", "open", "queued"}},
		{eventstore.ListEventsText("pending"), []string{"open"}},
		{eventstore.ListEventsText("processing"), []string{"open"}},
		{eventstore.ListEventsText("queued"), []string{"queued"}},
		{eventstore.ListEventsText("processed"), []string{"fresh", "settled"}},
		{eventstore.ListEventsText("failed"), []string{"failed", "fresh"}},
	} {
		require.Equal(t, c.want, partitionsOf(t, store.DB.Pool(), literal(c.q)), "%.60s", c.q)
	}
}
