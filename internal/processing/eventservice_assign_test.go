package processing_test

// Where an event worker assignment is written: in the claim's and the settlement's own
// transactions, what a refused one leaves, and a draft into a worker adopted meanwhile.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/agentstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// refusingAssignments is the registry's store with AssignWorkers refused while refuse is set, as
// the database refuses a transaction (or another agent adopted the worker): the rest is the store.
type refusingAssignments struct {
	processing.WorkerStore
	refuse atomic.Bool
}

func (r *refusingAssignments) AssignWorkers(ctx context.Context, claimID string, agent int64, a exactlyonce.WorkerAssignment) error {
	if r.refuse.Load() {
		return fmt.Errorf("assignment refused on purpose")
	}
	return r.WorkerStore.AssignWorkers(ctx, claimID, agent, a)
}

// A claim whose event worker assignment fails settles none of the tasks it would have given a
// worker: they go back, pending, and the next claim delivers them under an event worker, once
// each, in order, with exact books. An engine that went on with the tasks unassigned (or settled
// them) fails here: 4 settled where none may be.
func TestAFailedAssignmentSettlesNothingWithoutAWorker(t *testing.T) {
	t.Parallel()
	const refs, perRef = 4, 3
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, srv := newOrderReceiver(t, func(string, int, int) int { return http.StatusOK })
	ids := createReferenceTasks(t, ctx, store, srv.URL+"/hook", refs, perRef)
	registry := &refusingAssignments{WorkerStore: store.Agents}
	registry.refuse.Store(true)
	e := taskEngine(store, exactlyonce.BySweeper)
	e.Workers = &processing.EventService{Store: registry, AgentID: func() int64 { return 1 }}
	b, err := e.ProcessDue(ctx, 0, 50)
	require.NoError(t, err)
	require.Equal(t, refs, b.Claimed, "the heads")
	require.Zero(t, b.Settled, "nothing settled without its event worker")
	for _, id := range ids {
		ev, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Contains(t, []exactlyonce.State{exactlyonce.Pending, exactlyonce.Queued}, ev.State, "task %d", id)
	}

	registry.refuse.Store(false)
	settleAll(t, ctx, e, refs*perRef)
	rec.mu.Lock()
	require.Empty(t, rec.early)
	for r := 0; r < refs; r++ {
		require.Equal(t, []int{0, 1, 2}, rec.delivered[fmt.Sprintf("ref-%d", r)], "ref-%d", r)
	}
	rec.mu.Unlock()
	for _, id := range ids {
		ev, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Processed, ev.State, "task %d", id)
		require.Equal(t, 1, ev.ProcessCount, "task %d settled once", id)
		var worker sql.NullString
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT worker_id FROM events WHERE id = ?", id).Scan(&worker))
		require.True(t, worker.Valid && worker.String != "", "task %d delivered under an event worker", id)
	}
	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks))
}

var _ processing.DraftingStore = (*agentstore.Store)(nil)

// countingAssignments is the registry's store counting the assignments written through it
// (AssignWorkers: each a transaction of its own).
type countingAssignments struct {
	processing.WorkerStore
	n atomic.Int64
}

// DraftsInTransactions is the store's: the drafts written in the claims' and settlements'
// transactions are its registry's, and are not counted.
func (c *countingAssignments) DraftsInTransactions() bool {
	return c.WorkerStore.(processing.DraftingStore).DraftsInTransactions()
}

func (c *countingAssignments) AssignWorkers(ctx context.Context, claimID string, agent int64, a exactlyonce.WorkerAssignment) error {
	c.n.Add(1)
	return c.WorkerStore.AssignWorkers(ctx, claimID, agent, a)
}

// A claim's tasks get their event workers in the claim's own transaction, and the tasks a
// settlement hands on to the claim behind a full event worker in the settlement's, not in
// assignments of their own: one claim of 6 heads (WORKER_MAX_REFERENCES=2, so its three workers are
// full at once) delivers all 24 tasks with no assignment written apart, every task handed on joins
// a worker with room or a new one (never a full one), every full worker is done, and the books are
// exact. Before, the claim's tasks had an assignment of their own after the claim, and so had the
// tasks handed on by every settlement that handed some on behind a full worker (here 4
// assignments; 1 with the settlements' drafts alone).
func TestTasksGetTheirEventWorkersInTheClaimAndTheSettlements(t *testing.T) {
	t.Parallel()
	const refs, perRef = 6, 4
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, srv := newOrderReceiver(t, func(string, int, int) int { return http.StatusOK })
	ids := createReferenceTasks(t, ctx, store, srv.URL+"/hook", refs, perRef)
	registry := &countingAssignments{WorkerStore: store.Agents}
	e := taskEngine(store, exactlyonce.BySweeper)
	e.Workers = &processing.EventService{Store: registry, AgentID: func() int64 { return 1 }, MaxReferences: 2}
	b, err := e.ProcessDue(ctx, 0, 50)
	require.NoError(t, err)
	require.Equal(t, refs, b.Claimed, "the heads")
	require.Equal(t, refs*perRef, b.Settled, "every task, handed on from head to head within the claim")
	require.Zero(t, registry.n.Load(), "no assignment apart: the heads got their workers in the claim, the tasks handed on in the settlements")
	rec.mu.Lock()
	require.Empty(t, rec.early)
	for r := 0; r < refs; r++ {
		require.Equal(t, []int{0, 1, 2, 3}, rec.delivered[fmt.Sprintf("ref-%d", r)], "ref-%d", r)
	}
	rec.mu.Unlock()
	for _, id := range ids {
		var worker sql.NullString
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT worker_id FROM events WHERE id = ?", id).Scan(&worker))
		require.True(t, worker.Valid && worker.String != "", "task %d delivered under an event worker", id)
	}
	var settled int64
	for _, w := range allWorkers(t, ctx, store) {
		require.LessOrEqual(t, len(w.References), 2, "worker %s", w.ID)
		settled += w.TasksCompleted
		if w.WillTerminate {
			require.True(t, w.IsDone, "full worker %s done once its tasks are", w.ID)
		}
	}
	require.Equal(t, int64(refs*perRef), settled, "every task counted once, in one worker")
	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks))
}

// A settlement drafts the task it hands on behind a full worker into a worker with room that its
// EventService still counts as its own, but another agent adopted that worker meanwhile (this
// agent was ejected, and does not know it yet): the drafted growth is refused, the settlement is
// rolled back and runs again, the service forgets the worker, and the task joins a new one. The
// delivery is settled once, the adopted worker is left as its adopter has it, the books are exact.
// WORKER_MAX_REFERENCES=3: a, b and c fill the first worker, d starts a second with room; a/0 is
// held until d/0 has settled and the second worker is adopted. Then the same for a claim: the
// worker a/1 joined is adopted too, and the next claim, of e/0, drafts e into it, is refused, runs
// again and gives e a new worker.
func TestADraftIntoAnAdoptedWorkerRunsItsTransactionAgain(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a delivery held at the gate has 2 minutes, and the claim takes a task only with that much left
	defer cancel()
	rec, srv := newGatedReceiver(t, "a/0")
	var ids []int64
	for _, k := range []struct {
		ref string
		seq int
	}{{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"a", 1}} {
		payload, _ := json.Marshal(orderPayload{Ref: k.ref, Seq: k.seq})
		got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: srv.URL + "/hook", Payload: payload, ReferenceID: k.ref}})
		require.NoError(t, err)
		ids = append(ids, got[0].ID)
	}
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: 2 * time.Minute})
	e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Tasks: &processing.Tasks{Deliverer: client, Timeout: 2 * time.Minute}}
	e.Workers = &processing.EventService{Store: store.Agents, AgentID: func() int64 { return 1 }, MaxReferences: 3}
	drained := make(chan error, 1)
	go func() {
		b, err := e.ProcessDue(ctx, 0, 50)
		if err == nil && b.Settled != 5 {
			err = fmt.Errorf("settled %d of 5 in one claim", b.Settled)
		}
		drained <- err
	}()
	testutil.Eventually(t, 30*time.Second, "a/0 in delivery, b, c and d settled", func() bool {
		for _, id := range ids[1:4] {
			ev, err := store.Events.Get(ctx, id)
			require.NoError(t, err)
			if ev.State != exactlyonce.Processed {
				return false
			}
		}
		return rec.holding("a/0")
	})
	ws, err := store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 2)
	var full, roomy exactlyonce.EventWorker
	for _, w := range ws {
		if w.WillTerminate {
			full = w
		} else {
			roomy = w
		}
	}
	require.ElementsMatch(t, []string{"a", "b", "c"}, full.References)
	require.Equal(t, []string{"d"}, roomy.References)
	adopted, err := store.Agents.AdoptWorker(ctx, roomy.ID, 1, 2)
	require.NoError(t, err)
	require.True(t, adopted)

	rec.open("a/0")
	require.NoError(t, <-drained)
	rec.mu.Lock()
	require.Empty(t, rec.early)
	require.Equal(t, []int{0, 1}, rec.delivered["a"])
	rec.mu.Unlock()
	var worker string
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT worker_id FROM events WHERE id = ?", ids[4]).Scan(&worker))
	require.NotEqual(t, full.ID, worker, "a/1 joins no full worker")
	require.NotEqual(t, roomy.ID, worker, "a/1 joins no worker of another agent's")
	after, ok, err := store.Agents.Worker(ctx, roomy.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(2), after.AgentID)
	require.Equal(t, []string{"d"}, after.References, "the adopted worker is as its adopter has it")
	require.Equal(t, int64(1), after.TasksCompleted)
	require.NotContains(t, e.Workers.Workers(), roomy.ID, "the service forgot the worker it lost")

	adopted, err = store.Agents.AdoptWorker(ctx, worker, 1, 2)
	require.NoError(t, err)
	require.True(t, adopted)
	payload, _ := json.Marshal(orderPayload{Ref: "e", Seq: 0})
	got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: srv.URL + "/hook", Payload: payload, ReferenceID: "e"}})
	require.NoError(t, err)
	ids = append(ids, got[0].ID)
	b, err := e.ProcessDue(ctx, 0, 50)
	require.NoError(t, err)
	require.Equal(t, 1, b.Settled)
	var eWorker string
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT worker_id FROM events WHERE id = ?", got[0].ID).Scan(&eWorker))
	require.NotContains(t, []string{full.ID, roomy.ID, worker}, eWorker, "e/0 joins a new worker")
	after, ok, err = store.Agents.Worker(ctx, worker)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"a"}, after.References, "the worker adopted before the claim is as its adopter has it")
	require.NotContains(t, e.Workers.Workers(), worker, "the service forgot the worker it lost")
	for _, id := range ids {
		ev, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Processed, ev.State, "task %d", id)
		require.Equal(t, 1, ev.ProcessCount, "task %d settled once", id)
	}
	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks))
}

// roomRead is a fragment of the text of WorkersWithRoom (agentstore's workers.sql), the settlement's
// read of which of its heads' workers have room, and of no other statement.
const roomRead = "will_terminate = 0 AND worker_id IN ("

// A drafting settlement reads the room of none of its EventService's own workers: one it knows to
// be full has none (WORKER_MAX_REFERENCES=1: every worker is full as soon as it is made), and the
// room of one it last knew with room (WORKER_MAX_REFERENCES=100: one worker holds every reference)
// is checked in the statement that promotes. A drain of 6 references of 4 tasks sends no
// WorkersWithRoom, where it sent one in every settlement that handed a task on (3 with every worker
// full, 3 or more with room); every task joins its head's worker if that has room, else a new one,
// in order, once, with exact books.
func TestADraftingSettlementReadsNoRoomOfItsOwnWorkers(t *testing.T) {
	t.Parallel()
	const refs, perRef = 6, 4
	for _, max := range []int{1, 100} {
		_, dsn := testdb.DB(t, 8)
		db, tally := mysqltest.TalliedDB(t, dsn, 8, "")
		tally.Of = roomRead
		store, err := wire.StoresOn(db, mysql.Config{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rec, srv := newOrderReceiver(t, func(string, int, int) int { return http.StatusOK })
		ids := createReferenceTasks(t, ctx, store, srv.URL+"/hook", refs, perRef)
		e := taskEngine(store, exactlyonce.BySweeper)
		e.Workers = &processing.EventService{Store: store.Agents, AgentID: func() int64 { return 1 }, MaxReferences: max}
		before := tally.Matching()
		settleAll(t, ctx, e, refs*perRef)
		require.Zero(t, tally.Matching()-before, "max %d: no room read of the service's own workers", max)
		rec.mu.Lock()
		require.Empty(t, rec.early)
		for r := 0; r < refs; r++ {
			require.Equal(t, []int{0, 1, 2, 3}, rec.delivered[fmt.Sprintf("ref-%d", r)], "max %d: ref-%d", max, r)
		}
		rec.mu.Unlock()
		workers := map[string]bool{}
		for _, id := range ids {
			ev, err := store.Events.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, 1, ev.ProcessCount, "max %d: task %d settled once", max, id)
			var worker sql.NullString
			require.NoError(t, db.QueryRowContext(ctx, "SELECT worker_id FROM events WHERE id = ?", id).Scan(&worker))
			require.True(t, worker.Valid && worker.String != "", "max %d: task %d delivered under an event worker", max, id)
			workers[worker.String] = true
		}
		if max == 100 {
			require.Len(t, workers, 1, "every task joined its head's worker, which had room")
		} else {
			require.Len(t, workers, refs*perRef, "every task joined a new worker, its head's being full")
		}
		for _, w := range allWorkers(t, ctx, store) {
			require.LessOrEqual(t, len(w.References), max, "worker %s", w.ID)
			if w.WillTerminate {
				require.True(t, w.IsDone, "full worker %s done once its tasks are", w.ID)
			}
		}
		require.NoError(t, verify.WorkerBooks(ctx, db, mysqltest.PackedTasks))
	}
}

// A claim names its tasks' event workers in the statement that leases them (eventstore's Lease), not
// in an AssignTasks of their own after it: a drain of 6 references of 2 tasks (WORKER_MAX_REFERENCES=2)
// sends no AssignTasks (before: one in every claim that leased tasks with no worker, here 1), and
// every task is delivered under an event worker, in order, once, with exact books.
func TestAClaimNamesItsTasksWorkersInItsLease(t *testing.T) {
	t.Parallel()
	const refs, perRef = 6, 2
	_, dsn := testdb.DB(t, 8)
	db, tally := mysqltest.TalliedDB(t, dsn, 8, "")
	tally.Of = "UPDATE events SET worker_id = CASE" // AssignTasks (agentstore's workers.sql)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, srv := newOrderReceiver(t, func(string, int, int) int { return http.StatusOK })
	ids := createReferenceTasks(t, ctx, store, srv.URL+"/hook", refs, perRef)
	e := taskEngine(store, exactlyonce.BySweeper)
	e.Workers = &processing.EventService{Store: store.Agents, AgentID: func() int64 { return 1 }, MaxReferences: 2}
	settleAll(t, ctx, e, refs*perRef)
	require.Zero(t, tally.Matching(), "no AssignTasks: the leases named the workers")
	rec.mu.Lock()
	require.Empty(t, rec.early)
	for r := 0; r < refs; r++ {
		require.Equal(t, []int{0, 1}, rec.delivered[fmt.Sprintf("ref-%d", r)], "ref-%d", r)
	}
	rec.mu.Unlock()
	for _, id := range ids {
		ev, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 1, ev.ProcessCount, "task %d settled once", id)
		var worker sql.NullString
		require.NoError(t, db.QueryRowContext(ctx, "SELECT worker_id FROM events WHERE id = ?", id).Scan(&worker))
		require.True(t, worker.Valid && worker.String != "", "task %d delivered under an event worker", id)
	}
	require.NoError(t, verify.WorkerBooks(ctx, db, mysqltest.PackedTasks))
}
