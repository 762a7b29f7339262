package taskstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// runDirectoryChild is the child role "backfiller" (BackfillDirectory) or "compactor"
// (CompactDirectory): it stops for good at the step KILL_AT of its second transaction, says so
// with its connection's id, and waits to be killed.
func runDirectoryChild(role string) int {
	store, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	killAt := os.Getenv("KILL_AT")
	// The first step of each of its transactions.
	first := map[string]string{"backfiller": "TakeBackfill", "compactor": "LockTaskBuckets"}[role]
	txs := 0
	ctx := taskstore.WithDirectorySteps(context.Background(), func(tx mysql.Conn, step string) {
		if step == first {
			txs++
		}
		if step != killAt || txs != 2 {
			return
		}
		var conn int64
		if err := tx.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&conn); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("at %s conn %d\n", step, conn)
		select {} // until killed
	})
	if role == "backfiller" {
		units, done, err := store.Tasks.BackfillDirectory(ctx, 1000)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("done: %d units, complete %v\n", units, done)
		return 0
	}
	moved, err := store.Tasks.CompactDirectory(ctx, time.Now().Add(time.Hour))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("done: %d rows\n", moved)
	return 0
}

// directoryKilledAt starts a child in role on the database of dsn, SIGKILLs it once it is at step
// of its second transaction, and returns once the server has let its connection go (and so rolled
// its transaction back).
func directoryKilledAt(ctx context.Context, t *testing.T, db *sql.DB, dsn, role, step string) {
	t.Helper()
	c := child.Start(t, role, "DB_DSN="+dsn, "KILL_AT="+step)
	line, err := c.WaitLine("at "+step+" ", 60*time.Second)
	require.NoError(t, err, "the %s reached %s in its second transaction", role, step)
	var conn int64
	_, err = fmt.Sscanf(line, "at "+step+" conn %d", &conn)
	require.NoError(t, err, line)
	c.Kill()
	require.Eventually(t, func() bool {
		gone, err := mysqltest.ConnectionGone(ctx, db, conn)
		require.NoError(t, err)
		return gone
	}, 60*time.Second, 10*time.Millisecond, "the killed %s's connection is closed", role)
}

// Invariant: a backfill of the reference directory (the sweeper's maintenance) SIGKILLed at any
// step of a unit's transaction (the progress row taken, the unit's tasks read, their buckets
// locked, the slots' log read and moved into the cells, the cells read, the missing entries
// appended, the progress recorded, before the commit) loses nothing and writes nothing twice:
// what is committed is the units before it, whole (every task below the recorded progress has its
// entry once, and the tasks created since the migration theirs from their creates), and nothing
// of the killed unit; nothing stays locked (a create of each reference goes through); the next
// backfill, from another process, finishes from the recorded progress and every task has its
// entry once. A backfill that recorded its progress in a transaction of its own before appending
// the unit's entries (a COMMIT between the two) loses the unit's entries when killed at
// AppendDirectory: the test fails.
func TestKillingTheBackfillAtEachStepLosesNothing(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"TakeBackfill", "BackfillTasks", "LockTaskBuckets", "SlotLog", "AppendDirectory",
		"DeleteSlotLog", "ReadDirectoryEntries", "SetBackfill", "Commit"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			db, dsn := testdb.DB(t, 8)
			store := storesOn(t, db)
			// Tasks of a, b and c in every unit of ids, of d from the second one on.
			refs := []string{"kill-a", "kill-b", "kill-c", "kill-d"}
			for round := range 3 {
				for _, ref := range refs {
					if ref != "kill-d" || round > 0 {
						createOne(ctx, t, store, ref, round)
					}
				}
				for range 5 {
					_, err := store.Events.CreatePendingBatch(ctx, 200)
					require.NoError(t, err)
				}
			}
			require.NoError(t, mysqltest.ForgetReferenceDirectory(ctx, db))
			// Created after the migration: their creates logged their entries, which the backfill
			// moves into the cells (d's in its second unit) and does not append again.
			logged := map[int64]bool{}
			for _, ref := range refs {
				logged[createOne(ctx, t, store, ref, 9)] = true
			}

			directoryKilledAt(ctx, t, db, dsn, "backfiller", step)

			var next int64
			var until sql.NullInt64
			require.NoError(t, db.QueryRowContext(ctx, "SELECT next_id, until_id FROM reference_backfill").Scan(&next, &until))
			require.True(t, until.Valid && next < until.Int64, "the first unit committed, not the last: %d %v", next, until)
			for _, ref := range refs {
				var want [][2]int64
				for _, e := range truth(ctx, t, db, ref) {
					if e[0] < next || logged[e[0]] {
						want = append(want, e)
					}
				}
				entries, raw, err := taskstore.DirectoryEntries(ctx, db, ref)
				require.NoError(t, err)
				require.Equal(t, want, entries, "%s: the units before the killed one, whole, and nothing of it", ref)
				require.Equal(t, len(want), raw, "%s: each entry once", ref)
			}
			// Nothing stays locked: a create of each reference (their buckets) goes through.
			for _, ref := range refs {
				createOne(ctx, t, store, ref, 10)
			}

			units, done, err := storesOn(t, db).Tasks.BackfillDirectory(ctx, 1000)
			require.NoError(t, err)
			require.True(t, done, "the next backfill finishes (%d units)", units)
			after := storesOn(t, db)
			for _, ref := range refs {
				want := requireDirectory(ctx, t, db, ref, 0)
				require.Equal(t, want, listed(ctx, t, after, ref), ref)
			}
		})
	}
}

// Invariant: the compaction of the reference directory's log (the sweeper's maintenance)
// SIGKILLed at any step of a bucket's transaction (its bucket locked, its slots' log read, the
// cells appended to, the log rows deleted, before the commit) loses nothing and writes nothing
// twice: the buckets compacted before it are committed whole, the killed one is as it was (its
// log rows still there, its cells unchanged), so that every reference lists the same tasks, each
// entry once in its cell or its log; nothing stays locked (a create of each reference goes
// through); the next compaction, from another process, empties the log, each entry once. A
// compaction that deleted a bucket's log rows in a transaction of their own after appending them
// (a COMMIT between the two) writes them twice when killed at DeleteSlotLog: the test fails.
func TestKillingTheCompactionAtEachStepLosesNothing(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"LockTaskBuckets", "SlotLog", "AppendDirectory", "DeleteSlotLog", "Commit"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			db, dsn := testdb.DB(t, 8)
			store := storesOn(t, db)
			var refs []string
			for i := range 12 {
				refs = append(refs, fmt.Sprintf("compact-kill-%d", i))
			}
			for round := range 3 {
				for _, ref := range refs {
					createOne(ctx, t, store, ref, round)
				}
			}
			before := map[string][][2]int64{}
			for _, ref := range refs {
				before[ref] = listed(ctx, t, store, ref)
			}
			rows := logRows(ctx, t, db)

			directoryKilledAt(ctx, t, db, dsn, "compactor", step)

			left := logRows(ctx, t, db)
			require.Positive(t, left, "the killed bucket's log rows are still there")
			require.Less(t, left, rows, "the bucket compacted before it is committed")
			for _, ref := range refs {
				require.Equal(t, before[ref], requireDirectory(ctx, t, db, ref, 0), "%s: each entry once, in its cell or its log", ref)
				require.Equal(t, before[ref], listed(ctx, t, store, ref), ref)
			}
			for _, ref := range refs {
				createOne(ctx, t, store, ref, 10)
			}

			_, err := storesOn(t, db).Tasks.CompactDirectory(ctx, time.Now().Add(time.Minute))
			require.NoError(t, err)
			require.Zero(t, logRows(ctx, t, db), "the next compaction moved the whole log")
			for _, ref := range refs {
				want := requireDirectory(ctx, t, db, ref, 0)
				require.Equal(t, want, listed(ctx, t, store, ref), ref)
			}
		})
	}
}
