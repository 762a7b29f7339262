package eventstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// subpartitionOf returns the subpartition of `open` (its number) that holds each of ids, by asking
// each subpartition: the test does not assume how HASH(id) places a row.
func subpartitionOf(t *testing.T, db *sql.DB, ids []int64) map[int64]int {
	t.Helper()
	out := map[int64]int{}
	for i := range eventstore.OpenSubpartitions {
		got, err := mysql.ScanIDs(db.Query(fmt.Sprintf("SELECT id FROM events PARTITION (opensp%d)", i)))
		require.NoError(t, err)
		for _, id := range got {
			out[id] = i
		}
	}
	for _, id := range ids {
		_, ok := out[id]
		require.Truef(t, ok, "event %d is in no subpartition of open", id)
	}
	return out
}

// The subpartitions ClaimDue names are the schema's: `open` has exactly opensp0 to opensp7, and
// each of ClaimDue's statements reads the subpartitions it names and nothing else. A migration
// that changed them without the store would fail here, not at a claim.
func TestClaimDueNamesTheOpenSubpartitions(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	db := store.DB.Pool()
	rows, err := db.Query(`SELECT SUBPARTITION_NAME FROM information_schema.PARTITIONS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'events' AND PARTITION_NAME = 'open'
		ORDER BY SUBPARTITION_ORDINAL_POSITION`)
	require.NoError(t, err)
	var names, want []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	for i := range eventstore.OpenSubpartitions {
		want = append(want, fmt.Sprintf("opensp%d", i))
	}
	require.Equal(t, want, names)

	literal := func(q string) string { return strings.ReplaceAll(q, "?", "1") }
	for i := range eventstore.OpenSubpartitions {
		from, before := eventstore.ClaimDueTexts(i)
		require.Equal(t, want[i:], explainedSubpartitions(t, db, literal(from)), "from %d", i)
		if i == 0 {
			require.Empty(t, before)
			continue
		}
		require.Equal(t, want[:i], explainedSubpartitions(t, db, literal(before)), "before %d", i)
	}
}

// explainedSubpartitions returns the subpartitions of `open` EXPLAIN says q reads.
func explainedSubpartitions(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	parts, err := mysqltest.ExplainPartitions(context.Background(), db, q)
	require.NoError(t, err)
	var out []string
	for _, p := range parts {
		name, ok := strings.CutPrefix(p, "open_")
		require.Truef(t, ok, "%s reads %s", q[:40], p)
		out = append(out, name)
	}
	return out
}

// A claimer draining a backlog starts each claim at the next subpartition of `open`, away from the
// rows its last claim left delete-marked (events.sql, ClaimDue); an idle one starts at the first.
// Starting late, a claim still takes due events from the subpartitions before its start, so fewer
// than its limit still means none were left.
func TestClaimDueRotatesWhileFullAndWrapsAround(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	ids, err := store.Events.CreatePendingBatch(ctx, 64)
	require.NoError(t, err)
	where := subpartitionOf(t, store.DB.Pool(), ids)
	perPart := map[int]int{}
	for _, id := range ids {
		perPart[where[id]]++
	}
	require.Len(t, perPart, eventstore.OpenSubpartitions, "64 consecutive ids fill every subpartition")
	for p, n := range perPart {
		require.GreaterOrEqualf(t, n, 4, "subpartition %d", p)
	}

	claim := func(limit int) []int {
		t.Helper()
		got, err := store.Events.ClaimDue(ctx, claimFor(exactlyonce.BySweeper, time.Minute), 0, limit, mysqltest.SettleAll(fixedValue))
		require.NoError(t, err)
		var parts []int
		for _, id := range got.Settled {
			if !slices.Contains(parts, where[id]) {
				parts = append(parts, where[id])
			}
			perPart[where[id]]--
		}
		slices.Sort(parts)
		return parts
	}
	first := eventstore.OpenSubpartitions - 3
	// After a short claim: the first subpartition.
	require.Equal(t, []int{0}, claim(2))
	// After a full one: the next of the rotation, each time.
	eventstore.SetClaimFrom(store.Events, true, uint32(first-1))
	require.Equal(t, []int{first}, claim(2))
	require.Equal(t, []int{first + 1}, claim(2))
	// The last subpartition, then those before the start: a claim of every event left, starting at
	// the last subpartition, takes them all.
	left := 64 - 6
	eventstore.SetClaimFrom(store.Events, true, uint32(eventstore.OpenSubpartitions-2))
	var all []int
	for i := range eventstore.OpenSubpartitions {
		all = append(all, i)
	}
	require.Equal(t, all, claim(left))
	for p, n := range perPart {
		require.Zerof(t, n, "subpartition %d has %d events left unclaimed", p, n)
	}
	// That claim was full: the next starts at the next subpartition and finds nothing, which is
	// short: the one after starts at the first again.
	require.Empty(t, claim(2))
	more, err := store.Events.CreatePendingBatch(ctx, 16)
	require.NoError(t, err)
	where = subpartitionOf(t, store.DB.Pool(), more)
	require.Equal(t, []int{0}, claim(1))
}
