package taskstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// A settlement reads the references' queues in the statement that reads which of its tasks its
// LockLeased locked (LeasedAndQueued): one round trip, where a read of the queues of its own
// (QueuedOfReferences) made two, in every settlement of tasks with a reference. The queue it reads
// there is the one it hands on: a head with a task queued behind it is succeeded by that task, in
// order, and a head with none by nothing; a reference whose head failed for a retry keeps its
// queue.
func TestASettlementReadsItsLeasedTasksAndTheirQueuesInOneStatement(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, dsn := testdb.DB(t, 4)
	db, tally := mysqltest.TalliedDB(t, dsn, 4, "")
	tally.Of = "FROM events\nWHERE state = 2 AND routing_hash IN"
	store := storesOn(t, db)

	// "a": two heads queued behind it; "b": none; "c": one queued behind a head that fails for a retry.
	created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask("a", 1), refTask("b", 1),
		refTask("c", 1), refTask("a", 2), refTask("a", 3), refTask("c", 2)})
	require.NoError(t, err)
	heads := []int64{created[0].ID, created[1].ID, created[2].ID}
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
	claimed, err := store.Events.ClaimIDs(ctx, c, heads, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, claimed.Leased, 3)
	var outcomes []exactlyonce.TaskOutcome
	for _, e := range claimed.Leased {
		o := exactlyonce.TaskOutcome{Event: e, Delivered: e.Task.ReferenceID != "c",
			Attempt: exactlyonce.Attempt{Number: 1, Started: time.Now(), Status: 200}}
		if !o.Delivered {
			o.Attempt.Status, o.Attempt.Error, o.Wait = 503, "unavailable", time.Hour
		}
		outcomes = append(outcomes, o)
	}

	before, queueReads := tally.Statements(), tally.Matching()
	settled, err := store.Tasks.SettleTasks(ctx, c, outcomes, true)
	require.NoError(t, err)
	statements := tally.Statements() - before
	require.Equal(t, int64(1), tally.Matching()-queueReads, "the queues read once, in LeasedAndQueued")
	require.Equal(t, []int64{created[2].ID}, settled.Retrying)
	require.Len(t, settled.Completed, 2)
	require.Len(t, settled.Next, 1, "a's next task handed on; b has none; c's head is retrying")
	require.Equal(t, created[3].ID, settled.Next[0].ID, "a's second task, not its third")
	var state int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT state FROM events WHERE id = ?", created[5].ID).Scan(&state))
	require.Equal(t, int(exactlyonce.Queued), state, "c's second task stays queued behind its retrying head")
	// Ten statements with the queues read apart (QueuedOfReferences after the attempts), nine now.
	require.Equal(t, int64(9), statements)
}
