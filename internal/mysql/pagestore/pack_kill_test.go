package pagestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Invariant: a packer process SIGKILLed inside its pack's transaction, at each of its steps (its
// events locked, a unit's page row locked, its pages written, before its delete of the events,
// before its delete of their attempts, before its commit), loses nothing and stores nothing
// twice: every event and task reads as before, is listed and counted as before, and is stored
// once, in `events` or in a page; the next pack (its locks released with the killed connection)
// packs them all, once. The kill lands at the step itself: the child stops there, says so, and
// waits for it. A pack that committed its pages before deleting its events (a COMMIT sent on its
// connection just before DeletePacked) stores the events twice when killed at DeletePacked: the
// test fails.
func TestKillingAPackerAtEachStepLosesNothing(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"PackedEvents", "LockUnit", "LowerArchiveCursor", "DeletePacked", "DeletePackedAttempts", "Commit"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			db, dsn := testdb.DB(t, 8)
			store, err := wire.StoresOn(db, mysql.Config{})
			require.NoError(t, err)
			tasks, failed := history(t, store, 200)
			var upTo int64
			require.NoError(t, db.QueryRow("SELECT id FROM status").Scan(&upTo))
			before := readAll(t, store, upTo, tasks)
			var ids []int64
			for id := range before.events {
				ids = append(ids, id)
			}
			require.Len(t, ids, 200+len(tasks))
			auditOnce(t, store, ids)
			// Ids handed out past the history's pages, so that every unit of it can be packed.
			_, err = db.Exec("UPDATE status SET id = id + 30000")
			require.NoError(t, err)

			packer := child.Start(t, "packer", "DB_DSN="+dsn, "KILL_AT="+step)
			_, err = packer.WaitLine("at "+step, 60*time.Second)
			require.NoError(t, err, "the packer reached %s", step)
			packer.Kill()

			// The readers and the audit keep an event found in both tiers once (a pack may move it
			// between their reads); with nothing running, one in both is stored twice: the tiers
			// must add up to the events.
			tiers := func() (inEvents, packed int64) {
				t.Helper()
				require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM events").Scan(&inEvents))
				_, packed, err := mysqltest.PageRowCounts(context.Background(), db)
				require.NoError(t, err)
				return inEvents, packed
			}
			check := func(what string) {
				t.Helper()
				require.Equal(t, before, readAll(t, store, upTo, tasks), what)
				auditOnce(t, store, ids)
				inEvents, packed := tiers()
				require.EqualValues(t, len(ids), inEvents+packed, "%s: each event in one tier, once", what)
			}
			check("killed at " + step)
			inEvents, packed := tiers()
			require.EqualValues(t, len(ids), inEvents, "the killed pack's transaction was rolled back whole")
			require.Zero(t, packed)

			packAll(t, store) // waits, if it must, for the server to roll the killed pack back
			check("packed after the kill at " + step)
			var left int64
			require.NoError(t, db.QueryRow("SELECT COUNT(*), COALESCE(MIN(id), 0) FROM events").Scan(&inEvents, &left))
			require.EqualValues(t, 1, inEvents, "every event is packed but the failed task, which stays in events")
			require.Equal(t, failed, left)
		})
	}
}
