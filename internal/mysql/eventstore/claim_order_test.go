package eventstore_test

import (
	"context"
	"database/sql"
	"math"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The claims take no ORDER BY, although the agents' model (Hibernate Search's outbox polling)
// orders what it polls (docs/departures.md). On a table with no index, `ORDER BY ... LIMIT n FOR
// UPDATE SKIP LOCKED` must read, and lock, every candidate row before it can sort them: one claim
// of 10 holds the whole pending set and a second worker, skipping locked rows, finds nothing. The
// claims as written lock what they return, so two claims at once split the rows.
func TestClaimsTakeNoOrderBySoConcurrentClaimsSplitTheRows(t *testing.T) {
	t.Parallel()
	claims := 0
	for _, name := range eventstore.QueryNames() {
		q := eventstore.QueryText(name)
		if !strings.Contains(q, "SKIP LOCKED") {
			continue
		}
		claims++
		require.NotContains(t, strings.ToUpper(q), "ORDER BY", "claim %s", name)
	}
	require.GreaterOrEqual(t, claims, 2, "the processor's claim and the sweeper's")

	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	for range 100 {
		_, err := store.Events.CreatePending(ctx)
		require.NoError(t, err)
	}
	// claim runs q (ClaimDue's arguments: the whole hash space, no grace, tasks too, 10 rows) in a transaction
	// it leaves open, as a worker between its claim and its commit.
	claim := func(q string) map[int64]bool {
		t.Helper()
		tx, err := store.DB.Pool().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		rows, err := tx.QueryContext(ctx, q, 0, uint32(math.MaxUint32), 0, false, 10)
		require.NoError(t, err)
		defer rows.Close()
		got := map[int64]bool{}
		cols, err := rows.Columns()
		require.NoError(t, err)
		for rows.Next() {
			dest := make([]any, len(cols))
			var id int64
			dest[0] = &id
			for i := 1; i < len(dest); i++ {
				dest[i] = new(any)
			}
			require.NoError(t, rows.Scan(dest...))
			got[id] = true
		}
		require.NoError(t, rows.Err())
		return got
	}

	q := eventstore.QueryText("ClaimDue")
	first, second := claim(q), claim(q)
	require.Len(t, first, 10)
	require.Len(t, second, 10, "a second claim beside the first gets rows of its own")
	for id := range second {
		require.False(t, first[id], "event %d claimed twice", id)
	}

	// The same claim ordered, on the same events (the two above still hold theirs): the first takes
	// 10 and locks every other candidate too; the second gets nothing.
	ordered := strings.Replace(q, "LIMIT ?", "ORDER BY id LIMIT ?", 1)
	require.NotEqual(t, q, ordered)
	require.Len(t, claim(ordered), 10)
	require.Empty(t, claim(ordered), "with ORDER BY, one claim holds the whole pending set")
}

// Pending is a state, not a NULL value (docs/departures.md): the source's claim asks for `value IS
// NULL`, which no partitioning can prune, so it reads the whole processed history; the claims here
// ask for `state < 2` and read only the `open` partition, however large the history grows.
func TestClaimsReadOnlyTheOpenPartition(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	literal := func(q string) string {
		return strings.ReplaceAll(strings.ReplaceAll(q, "/*ids*/", "1, 2, 3"), "?", "1")
	}
	for _, name := range []string{"ClaimDue", "ClaimIDs"} {
		require.Equal(t, []string{"open"}, partitionsOf(t, store.DB.Pool(), literal(eventstore.QueryText(name))), name)
	}
	require.Equal(t, []string{"failed", "fresh", "open", "queued", "settled"},
		partitionsOf(t, store.DB.Pool(), "SELECT id FROM events WHERE value IS NULL LIMIT 1 FOR UPDATE SKIP LOCKED"),
		"the source's claim reads every partition")
}
