package pagestore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// The pack's statements that name the folded states (30, 40) read the history (`settled`) as their
// comments say, and no more; a packed event's read, and the move's statements of a page, are pruned
// to its page's partition.
func TestStatementsNamingFoldedStatesArePruned(t *testing.T) {
	t.Parallel()
	db := testdb.Core(t, mysql.Config{}, 2)
	literal := func(q string) string {
		q = strings.ReplaceAll(q, "/*ids*/", "1, 2, 3")
		q = strings.ReplaceAll(q, "/*units*/", "1, 2")
		return strings.ReplaceAll(q, "?", "1")
	}
	for _, c := range []struct {
		q    string
		want []string
	}{
		{pagestore.Queries.PackableUnits, []string{"fresh", "open", "queued", "settled"}},
		{pagestore.Queries.PackedEvents, []string{"settled"}},
		{pagestore.Queries.PackedRows, []string{"settled"}},
		{pagestore.Queries.DeletePacked, []string{"settled"}},
		{pagestore.GetPackedText(12345), []string{"p1"}},
		// The move's reads and its delete of a page (archive.sql): one partition, the page's.
		{pagestore.ArchiveQueries.PageSize, []string{"p1"}},
		{pagestore.ArchiveQueries.PageRows, []string{"p1"}},
		{pagestore.ArchiveQueries.LockPageRows, []string{"p1"}},
		{pagestore.ArchiveQueries.DeletePage, []string{"p1"}},
	} {
		got, err := mysqltest.PartitionsOf(context.Background(), db.Pool(), literal(c.q))
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%.60s", c.q)
	}
}
