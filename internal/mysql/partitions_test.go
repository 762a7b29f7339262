package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// layout reads the events table's partitions and how many subpartitions each has.
func layout(t *testing.T, store *wire.Stores) map[string]int {
	t.Helper()
	rows, err := store.DB.Pool().Query(`SELECT PARTITION_NAME, COUNT(*) FROM information_schema.PARTITIONS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'events' GROUP BY PARTITION_NAME`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		require.NoError(t, rows.Scan(&name, &n))
		out[name] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// Migration 0011 splits `settled` into `settled` (30) and `failed` (40), each with 8 HASH(id)
// subpartitions, keeps every row in the partition of its state, and can be run again.
func TestFailedPartitionMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	db := store.DB.Pool()
	want := map[string]int{"open": 8, "queued": 8, "fresh": 8, "settled": 8, "failed": 8}
	require.Equal(t, want, layout(t, store))

	// A database as 0010 left it, with folded history of both kinds: 0011 applied over it.
	_, err := db.Exec("ALTER TABLE events REORGANIZE PARTITION settled, failed INTO (PARTITION settled VALUES LESS THAN MAXVALUE)")
	require.NoError(t, err)
	require.NotContains(t, layout(t, store), "failed")
	_, err = db.Exec(`INSERT INTO events (id, routing_hash, state, created_at) VALUES
		(1, 1, 30, NOW(6)), (2, 2, 40, NOW(6)), (3, 3, 30, NOW(6)), (4, 4, 40, NOW(6)), (5, 5, 0, NOW(6)), (6, 6, 20, NOW(6))`)
	require.NoError(t, err)
	_, err = db.Exec("DELETE FROM schema_migrations WHERE version = 11")
	require.NoError(t, err)
	require.NoError(t, mysql.Migrate(ctx, db))
	require.Equal(t, want, layout(t, store))
	ids := func(partition string) []int64 {
		got, err := idsOf(db, "SELECT id FROM events PARTITION ("+partition+") ORDER BY id")
		require.NoError(t, err)
		return got
	}
	require.Equal(t, []int64{1, 3}, ids("settled"))
	require.Equal(t, []int64{2, 4}, ids("failed"))
	require.Equal(t, []int64{6}, ids("fresh"))

	// Run again (the runner's rerun after a failure): 1517, taken as applied; nothing moves.
	_, err = db.Exec("DELETE FROM schema_migrations WHERE version = 11")
	require.NoError(t, err)
	require.NoError(t, mysql.Migrate(ctx, db))
	require.Equal(t, want, layout(t, store))
	require.Equal(t, []int64{2, 4}, ids("failed"))
	violations, err := mysql.CheckRules(ctx, db)
	require.NoError(t, err)
	require.Empty(t, violations)
}

// Every statement that names the folded states (30, 40) is pruned as its comment says: none of them
// but the re-creation of a lost settled_count row reads the processed history (`settled`), which is
// what this one does. (The stores' statements are checked by each store's test of this name.)
func TestStatementsNamingFoldedStatesArePruned(t *testing.T) {
	t.Parallel()
	db := testdb.Core(t, mysql.Config{}, 2)
	got, err := mysqltest.PartitionsOf(context.Background(), db.Pool(), mysql.Queries.CountSettledEvents)
	require.NoError(t, err)
	require.Equal(t, append([]string{"failed"}, append(pagePartitions(), "settled")...), got)
}

// pagePartitions are event_pages' partitions, sorted as partitionsOf sorts them.
func pagePartitions() []string {
	out := make([]string, 1024)
	for i := range out {
		out[i] = fmt.Sprintf("p%d", i)
	}
	slices.Sort(out)
	return out
}

// idsOf runs q and returns the ids it reads.
func idsOf(db *sql.DB, q string) ([]int64, error) {
	rows, err := db.Query(q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ids := []int64{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
