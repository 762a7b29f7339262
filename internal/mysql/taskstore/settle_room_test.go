package taskstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The room of a drafting EventService's own event worker is its guess (DraftWorkers.Room), checked in
// the promotion (agentstore's WorkerIfRoom). These tests hold reference x's head x/0 leased to a
// claim, in worker w_own of agent 1 with room, and x/1 queued behind it.
func guessedRoomSetup(ctx context.Context, t *testing.T) (*wire.Stores, exactlyonce.Claim, exactlyonce.Event, int64) {
	t.Helper()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	var ids []int64
	for i := range 2 {
		created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask("x", i)})
		require.NoError(t, err)
		ids = append(ids, created[0].ID)
	}
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
	claimed, err := store.Events.ClaimIDs(ctx, c, ids[:1], mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, claimed.Leased, 1)
	require.NoError(t, store.Agents.AssignWorkers(ctx, c.ID, 1, exactlyonce.WorkerAssignment{
		New:   []exactlyonce.EventWorker{{ID: "w_own", AgentID: 1, MaxReferenceCount: 10}},
		Grow:  []exactlyonce.WorkerGrowth{{ID: "w_own", AddTasks: 1, References: []string{"x"}}},
		Tasks: map[string][]int64{"w_own": {ids[0]}},
	}))
	head := claimed.Leased[0]
	task := *head.Task
	task.WorkerID = "w_own"
	head.Task = &task
	return store, c, head, ids[1]
}

// delivered is the outcome of head's first attempt, delivered.
func delivered(head exactlyonce.Event) []exactlyonce.TaskOutcome {
	return []exactlyonce.TaskOutcome{{Event: head, Delivered: true, Attempt: exactlyonce.Attempt{Number: 1, Started: time.Now(), Status: 200}}}
}

// draftInto drafts every task it is given into a new worker id of agent 1, and guesses room for
// the workers in roomy (and knows no other).
func draftInto(id string, roomy ...string) *exactlyonce.DraftWorkers {
	return &exactlyonce.DraftWorkers{Agent: 1,
		Draft: func(tasks []exactlyonce.Event) exactlyonce.WorkerAssignment {
			if len(tasks) == 0 {
				return exactlyonce.WorkerAssignment{}
			}
			a := exactlyonce.WorkerAssignment{Tasks: map[string][]int64{},
				New: []exactlyonce.EventWorker{{ID: id, AgentID: 1, MaxReferenceCount: 10}}}
			var refs []string
			for _, task := range tasks {
				a.Tasks[id] = append(a.Tasks[id], task.ID)
				refs = append(refs, task.Task.ReferenceID)
			}
			a.Grow = []exactlyonce.WorkerGrowth{{ID: id, AddTasks: int64(len(tasks)), References: refs}}
			return a
		},
		Room: func(w string) (bool, bool) {
			for _, r := range roomy {
				if r == w {
					return true, true
				}
			}
			return false, false
		}}
}

// A settlement that guesses its own worker has room, where another agent adopted that worker and
// filled it meanwhile (its EventService does not know it yet), finds the room gone in the promotion:
// it is rolled back with a conflict naming the worker, having written nothing. Run again without the
// guess (the EventService forgot the worker), it reads the room, drafts x/1 into a new worker and
// hands it on; x/0 settled once, with one attempt, and the books exact.
func TestAGuessedRoomThatIsGoneRollsTheSettlementBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, c, head, next := guessedRoomSetup(ctx, t)
	adopted, err := store.Agents.AdoptWorker(ctx, "w_own", 1, 2)
	require.NoError(t, err)
	require.True(t, adopted)
	require.NoError(t, store.Agents.AssignWorkers(ctx, c.ID, 2, exactlyonce.WorkerAssignment{
		Grow: []exactlyonce.WorkerGrowth{{ID: "w_own", References: []string{"x", "y"}, WillTerminate: true}},
	}))

	_, err = store.Tasks.SettleTasksDrafting(ctx, c, delivered(head), true, draftInto("w_new", "w_own"))
	var conflict *exactlyonce.WorkerConflictError
	require.True(t, errors.As(err, &conflict), "a conflict, not %v", err)
	require.Equal(t, "w_own", conflict.WorkerID)
	ev, err := store.Events.Get(ctx, head.ID)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processing, ev.State, "x/0 still leased: nothing written")
	attempts, err := store.Tasks.Attempts(ctx, head.ID)
	require.NoError(t, err)
	require.Empty(t, attempts)

	s, err := store.Tasks.SettleTasksDrafting(ctx, c, delivered(head), true, draftInto("w_new"))
	require.NoError(t, err)
	require.Equal(t, []int64{head.ID}, s.Completed)
	require.Len(t, s.Next, 1)
	require.Equal(t, next, s.Next[0].ID)
	require.Equal(t, "w_new", s.Next[0].Task.WorkerID, "x/1 drafted into a new worker, not the full one")
	ev, err = store.Events.Get(ctx, head.ID)
	require.NoError(t, err)
	require.Equal(t, 1, ev.ProcessCount)
	attempts, err = store.Tasks.Attempts(ctx, head.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	_, err = store.Tasks.SettleTasks(ctx, c, delivered(s.Next[0]), false)
	require.NoError(t, err)
	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks))
}

// The promotion's check of a guessed room waits for no other worker's row: with another event
// worker's row held by a transaction of the test's (as a settlement or an assignment of another
// agent would hold it), the settlement of x/0 promotes x/1 into w_own, which has room, and commits
// while that row is still held. A check that locked what it read (a locking read of the `active`
// partition, which scans it) would wait for that row until the lock wait timeout, and fail.
func TestTheRoomCheckWaitsForNoOtherWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, c, head, next := guessedRoomSetup(ctx, t)
	other := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
	require.NoError(t, store.Agents.AssignWorkers(ctx, other.ID, 2, exactlyonce.WorkerAssignment{
		New:  []exactlyonce.EventWorker{{ID: "w_other", AgentID: 2, MaxReferenceCount: 10}},
		Grow: []exactlyonce.WorkerGrowth{{ID: "w_other", References: []string{"z"}}},
	}))
	hold, err := store.DB.Pool().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer hold.Rollback()
	res, err := hold.ExecContext(ctx, "UPDATE event_workers SET tasks_completed = tasks_completed + 1 WHERE is_done = 0 AND worker_id = 'w_other'")
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the other worker's row is held")

	s, err := store.Tasks.SettleTasksDrafting(ctx, c, delivered(head), true, draftInto("w_new", "w_own"))
	require.NoError(t, err, "settled while another worker's row is held")
	require.Len(t, s.Next, 1)
	require.Equal(t, next, s.Next[0].ID)
	require.Equal(t, "w_own", s.Next[0].Task.WorkerID, "x/1 joins its head's worker, which has room")
	require.NoError(t, hold.Rollback())
	_, err = store.Tasks.SettleTasks(ctx, c, delivered(s.Next[0]), false)
	require.NoError(t, err)
	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks))
}
