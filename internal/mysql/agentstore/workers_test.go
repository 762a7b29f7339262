package agentstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/agentstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// An assignment may grow only a live worker its agent runs that is not full: one another agent
// adopted, or one full, fails it with a WorkerConflictError and writes nothing (not even its new
// workers); adoption is taken by one
// agent only; an agent's stop makes its idle workers done, and done workers are pruned after the
// retention.
func TestEventWorkerRegistryGuards(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{
		{URL: "http://127.0.0.1:1/a", Payload: json.RawMessage(`{}`), ReferenceID: "a"},
		{URL: "http://127.0.0.1:1/b", Payload: json.RawMessage(`{}`), ReferenceID: "b"},
	})
	require.NoError(t, err)
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: exactlyonce.BySweeper, Lease: time.Minute}
	claimed, err := store.Events.ClaimIDs(ctx, c, []int64{created[0].ID, created[1].ID}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, claimed.Leased, 2)
	require.NoError(t, store.Agents.AssignWorkers(ctx, c.ID, 1, exactlyonce.WorkerAssignment{
		New:   []exactlyonce.EventWorker{{ID: "w_1", AgentID: 1, MaxReferenceCount: 5}},
		Grow:  []exactlyonce.WorkerGrowth{{ID: "w_1", AddTasks: 1, References: []string{"a"}}},
		Tasks: map[string][]int64{"w_1": {created[0].ID}},
	}))

	ok, err := store.Agents.AdoptWorker(ctx, "w_1", 1, 2)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = store.Agents.AdoptWorker(ctx, "w_1", 1, 3)
	require.NoError(t, err)
	require.False(t, ok, "adopted once")

	err = store.Agents.AssignWorkers(ctx, c.ID, 1, exactlyonce.WorkerAssignment{
		New:   []exactlyonce.EventWorker{{ID: "w_new", AgentID: 1, MaxReferenceCount: 5}},
		Grow:  []exactlyonce.WorkerGrowth{{ID: "w_1", AddTasks: 1, References: []string{"a", "b"}}},
		Tasks: map[string][]int64{"w_1": {created[1].ID}},
	})
	var conflict *exactlyonce.WorkerConflictError
	require.True(t, errors.As(err, &conflict), "%v", err)
	require.Equal(t, "w_1", conflict.WorkerID)
	ws, err := store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1, "nothing of the failed assignment was written")
	require.Equal(t, []string{"a"}, ws[0].References)
	require.Equal(t, int64(2), ws[0].AgentID)
	require.Equal(t, int64(1), ws[0].TasksRemaining)
	_, found, err := store.Agents.Worker(ctx, "w_new")
	require.NoError(t, err)
	require.False(t, found)

	// A full worker (willTerminate) takes no new task: growing it is a conflict too.
	require.NoError(t, store.Agents.AssignWorkers(ctx, c.ID, 1, exactlyonce.WorkerAssignment{
		New:  []exactlyonce.EventWorker{{ID: "w_full", AgentID: 1, MaxReferenceCount: 1}},
		Grow: []exactlyonce.WorkerGrowth{{ID: "w_full", References: []string{"x"}, WillTerminate: true}},
	}))
	err = store.Agents.AssignWorkers(ctx, c.ID, 1, exactlyonce.WorkerAssignment{
		Grow:  []exactlyonce.WorkerGrowth{{ID: "w_full", AddTasks: 1, References: []string{"x", "b"}, WillTerminate: true}},
		Tasks: map[string][]int64{"w_full": {created[1].ID}},
	})
	require.True(t, errors.As(err, &conflict), "a full worker grown: %v", err)
	require.Equal(t, "w_full", conflict.WorkerID)
	full, _, err := store.Agents.Worker(ctx, "w_full")
	require.NoError(t, err)
	require.Zero(t, full.TasksRemaining)
	require.Equal(t, []string{"x"}, full.References)

	// A stop of a worker with a task left: willTerminate, still live; settling its task makes it done.
	require.NoError(t, store.Agents.StopWorkers(ctx, []string{"w_1"}))
	w, _, err := store.Agents.Worker(ctx, "w_1")
	require.NoError(t, err)
	require.True(t, w.WillTerminate)
	require.False(t, w.IsDone)
	ev := claimed.Leased[0]
	if ev.ID != created[0].ID {
		ev = claimed.Leased[1]
	}
	ev.Task.WorkerID = "w_1"
	_, err = store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: ev, Final: true,
		Attempt: exactlyonce.Attempt{Number: 1, Status: 410, Error: "gone"}}}, false)
	require.NoError(t, err)
	w, _, err = store.Agents.Worker(ctx, "w_1")
	require.NoError(t, err)
	require.True(t, w.IsDone)
	require.Equal(t, int64(1), w.TasksFailed)
	require.Zero(t, w.TasksRemaining)
	require.Nil(t, w.LastCompletedTask, "a failed task is not a completed one")

	n, err := store.Agents.PruneWorkers(ctx, time.Hour, 10)
	require.NoError(t, err)
	require.Zero(t, n, "kept for the retention")
	time.Sleep(5 * time.Millisecond) // the retention below is 1 ms: let the done row age past it
	n, err = store.Agents.PruneWorkers(ctx, time.Millisecond, 10)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	_, found, err = store.Agents.Worker(ctx, "w_1")
	require.NoError(t, err)
	require.False(t, found)
}

// Every statement about live event workers reads only the `active` partition of event_workers:
// its cost is the live workers, not the done ones kept for WORKER_RETENTION.
func TestLiveEventWorkerStatementsReadOnlyTheActivePartition(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	literal := func(q string) string {
		for _, m := range []string{"/*remaining*/", "/*completed*/", "/*failed*/", "/*promoted*/", "/*last*/", "/*add*/", "/*refs*/", "/*count*/", "/*will*/"} {
			q = strings.ReplaceAll(q, m, "WHEN 'w' THEN 1")
		}
		q = strings.ReplaceAll(q, "/*ids*/", "'w'")
		return strings.ReplaceAll(q, "?", "1")
	}
	for _, name := range []string{"GrowWorkers", "WorkersOfAgent", "SettleWorkers", "WorkersWithRoom", "WorkerIfRoom", "ActiveWorkers", "AdoptWorker", "StopWorkers"} {
		parts := explainPartitions(t, store.DB.Pool(), literal(agentstore.QueryText(name)))
		require.Equal(t, []string{"active"}, parts, name)
	}
	// The check can fail: the read of one worker by id (GET /workers/{id}) reads both.
	require.ElementsMatch(t, []string{"active", "done"}, explainPartitions(t, store.DB.Pool(), literal(agentstore.QueryText("WorkerByID"))))
	require.Equal(t, []string{"done"}, explainPartitions(t, store.DB.Pool(), literal(agentstore.QueryText("PruneWorkers"))))
}

// An assignment inserts its new workers in one statement: five new workers, each with a task,
// cost five statements in all (begin, the insert, the tasks' workers, the growth, commit), where
// an insert per worker made nine; each worker is as its growth left it.
func TestAnAssignmentInsertsItsNewWorkersInOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := testdb.DB(t, 4)
	db, tally := mysqltest.TalliedDB(t, dsn, 4, "")
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	var tasks []exactlyonce.NewTask
	for _, ref := range []string{"a", "b", "c", "d", "e"} {
		tasks = append(tasks, exactlyonce.NewTask{URL: "http://127.0.0.1:1/" + ref, Payload: json.RawMessage(`{}`), ReferenceID: ref})
	}
	created, err := store.Tasks.CreateTasks(ctx, tasks)
	require.NoError(t, err)
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: exactlyonce.BySweeper, Lease: time.Minute}
	var ids []int64
	for _, ct := range created {
		ids = append(ids, ct.ID)
	}
	claimed, err := store.Events.ClaimIDs(ctx, c, ids, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, claimed.Leased, 5)
	a := exactlyonce.WorkerAssignment{Tasks: map[string][]int64{}}
	for i, ref := range []string{"a", "b", "c", "d", "e"} {
		w := "w_" + ref
		a.New = append(a.New, exactlyonce.EventWorker{ID: w, AgentID: 1, MaxReferenceCount: 1, FirstHash: uint32(i)})
		a.Grow = append(a.Grow, exactlyonce.WorkerGrowth{ID: w, AddTasks: 1, References: []string{ref}, WillTerminate: true})
		a.Tasks[w] = []int64{ids[i]}
	}
	before := tally.Statements()
	require.NoError(t, store.Agents.AssignWorkers(ctx, c.ID, 1, a))
	require.Equal(t, int64(5), tally.Statements()-before, "begin, one insert, the tasks' workers, the growth, commit")
	ws, err := store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 5)
	for _, w := range ws {
		require.Equal(t, []string{strings.TrimPrefix(w.ID, "w_")}, w.References)
		require.Equal(t, int64(1), w.TasksRemaining)
		require.True(t, w.WillTerminate, "full once grown")
		require.Equal(t, int64(1), w.AgentID)
	}
}
