package processing_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// allWorkers lists the registry, active and done.
func allWorkers(t *testing.T, ctx context.Context, store *wire.Stores) []exactlyonce.EventWorker {
	t.Helper()
	active, err := store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	done, err := store.Agents.DoneWorkers(ctx, 1000)
	require.NoError(t, err)
	return append(active, done...)
}

// WORKER_MAX_REFERENCES=3 and the tasks of 10 references: the EventService packs the heads into 4
// event workers, three full (willTerminate) and one with room. A full worker takes no new task: the
// next task of each of its references goes to a worker with room, or a new one, so every full worker
// is done once its own tasks are, and at most one worker, with room, lives on. The books match the
// task rows exactly, a failed task counted as failed, every task counted once.
func TestEventServicePacksReferencesIntoWorkers(t *testing.T) {
	t.Parallel()
	const refs, perRef = 10, 5
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, srv := newOrderReceiver(t, func(ref string, seq, n int) int {
		if ref == "ref-4" && seq == 1 {
			return http.StatusBadRequest // fails for good: counted in tasksFailed
		}
		return http.StatusOK
	})
	createReferenceTasks(t, ctx, store, srv.URL+"/hook", refs, perRef)
	e := taskEngine(store, exactlyonce.BySweeper)
	e.Workers = &processing.EventService{Store: store.Agents, AgentID: func() int64 { return 1 }, MaxReferences: 3}
	settleAll(t, ctx, e, refs*perRef)
	rec.mu.Lock()
	require.Empty(t, rec.early)
	for r := 0; r < refs; r++ {
		want := []int{0, 1, 2, 3, 4}
		if r == 4 {
			want = []int{0, 2, 3, 4}
		}
		require.Equal(t, want, rec.delivered[fmt.Sprintf("ref-%d", r)])
	}
	rec.mu.Unlock()

	ws := allWorkers(t, ctx, store)
	require.GreaterOrEqual(t, len(ws), 4, "the heads alone fill three workers and start a fourth")
	var full, settled int64
	var live []string
	for _, w := range ws {
		require.Equal(t, 3, w.MaxReferenceCount)
		require.Equal(t, int64(1), w.AgentID)
		require.LessOrEqual(t, len(w.References), 3, "worker %s", w.ID)
		require.Zero(t, w.TasksRemaining, "worker %s", w.ID)
		settled += w.TasksCompleted + w.TasksFailed
		if w.WillTerminate {
			full++
			require.Len(t, w.References, 3, "full worker %s", w.ID)
			require.True(t, w.IsDone, "full worker %s drained", w.ID)
		} else {
			require.Less(t, len(w.References), 3)
			require.False(t, w.IsDone, "a worker with room lives on")
			live = append(live, w.ID)
		}
	}
	require.GreaterOrEqual(t, full, int64(3))
	require.LessOrEqual(t, len(live), 1, "a worker is made only when none has room")
	require.Equal(t, int64(refs*perRef), settled, "every task counted once, in one worker")
	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks))
	require.NoError(t, e.Workers.ForgetDone(ctx))
	require.ElementsMatch(t, live, e.Workers.Workers(), "the service forgets the done workers")

	// Stopping the service (its agent leaving) makes the last worker (if any) willTerminate, and
	// done: it has nothing left.
	require.NoError(t, e.Workers.Stop(ctx))
	active, err := store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	require.Empty(t, active)
}

// gatedReceiver answers every delivery 200, but holds those of the tasks (ref/seq) whose gate is
// shut until it is opened. It records each reference's deliveries in order, which are in flight,
// and any task attempted while an earlier task of its reference had no answer.
type gatedReceiver struct {
	mu        sync.Mutex
	gates     map[string]chan struct{}
	inFlight  map[string]bool
	answered  map[string]int // ref -> highest seq answered
	delivered map[string][]int
	early     []string
}

func newGatedReceiver(t *testing.T, shut ...string) (*gatedReceiver, *httptest.Server) {
	r := &gatedReceiver{gates: map[string]chan struct{}{}, inFlight: map[string]bool{}, answered: map[string]int{},
		delivered: map[string][]int{}}
	for _, k := range shut {
		r.gates[k] = make(chan struct{})
	}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *gatedReceiver) serve(w http.ResponseWriter, req *http.Request) {
	var p orderPayload
	if err := json.NewDecoder(req.Body).Decode(&p); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	key := fmt.Sprintf("%s/%d", p.Ref, p.Seq)
	r.mu.Lock()
	if last, ok := r.answered[p.Ref]; (ok && p.Seq > last+1) || (!ok && p.Seq > 0) {
		r.early = append(r.early, key+" attempted before the task before it was answered")
	}
	r.inFlight[key] = true
	gate := r.gates[key]
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-req.Context().Done():
			return
		}
	}
	r.mu.Lock()
	delete(r.inFlight, key)
	r.answered[p.Ref] = max(r.answered[p.Ref], p.Seq)
	r.delivered[p.Ref] = append(r.delivered[p.Ref], p.Seq)
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *gatedReceiver) open(key string) { close(r.gates[key]) }

func (r *gatedReceiver) holding(keys ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if !r.inFlight[k] {
			return false
		}
	}
	return true
}

// A full event worker takes no new task: once full it no longer accepts new events and completes
// all those it holds until its queue is empty. WORKER_MAX_REFERENCES=2:
// the heads of references a and b fill the first worker; while they are being delivered, three
// more tasks of a and b arrive, queued behind them. When the heads settle, the next tasks go to
// another worker, and the full one is done at once, while a later task of its references is still
// being delivered; the later tasks are delivered in order by the other workers, each full one done
// once its own tasks are, and the books are exact.
func TestAFullEventWorkerTakesNoNewTask(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rec, srv := newGatedReceiver(t, "a/0", "b/0", "a/1")
	create := func(ref string, seq int) int64 {
		payload, _ := json.Marshal(orderPayload{Ref: ref, Seq: seq})
		got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: srv.URL + "/hook", Payload: payload, ReferenceID: ref}})
		require.NoError(t, err)
		return got[0].ID
	}
	create("a", 0)
	create("b", 0)
	// A delivery held at the gate must not time out while the test waits: a long timeout.
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: 2 * time.Minute})
	e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Tasks: &processing.Tasks{Deliverer: client, Timeout: 2 * time.Minute}}
	e.Workers = &processing.EventService{Store: store.Agents, AgentID: func() int64 { return 1 }, MaxReferences: 2}
	drained := make(chan error, 1)
	go func() {
		for settled := 0; settled < 5; {
			b, err := e.ProcessDue(ctx, 0, 50)
			if err != nil {
				drained <- err
				return
			}
			settled += b.Settled + b.GaveUp
		}
		drained <- nil
	}()

	testutil.Eventually(t, 30*time.Second, "both heads in delivery", func() bool { return rec.holding("a/0", "b/0") })
	ws, err := store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	full := ws[0]
	require.True(t, full.WillTerminate, "two references: full")
	require.ElementsMatch(t, []string{"a", "b"}, full.References)
	require.Equal(t, int64(2), full.TasksRemaining)

	// Tasks that arrive after the worker filled, queued behind its heads.
	later := []int64{create("a", 1), create("b", 1), create("a", 2)}
	rec.open("a/0")
	rec.open("b/0")
	testutil.Eventually(t, 30*time.Second, "the next task of a in delivery", func() bool { return rec.holding("a/1") })
	testutil.Eventually(t, 20*time.Second, "the full worker done once its own tasks are settled, while a/1 is delivered", func() bool {
		w, _, err := store.Agents.Worker(ctx, full.ID)
		require.NoError(t, err)
		return w.IsDone
	})
	require.True(t, rec.holding("a/1"), "a later task of its reference still in delivery")
	w, _, err := store.Agents.Worker(ctx, full.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), w.TasksCompleted, "its own two tasks, no more")
	require.Zero(t, w.TasksRemaining)

	rec.open("a/1")
	require.NoError(t, <-drained)
	rec.mu.Lock()
	require.Empty(t, rec.early)
	require.Equal(t, []int{0, 1, 2}, rec.delivered["a"])
	require.Equal(t, []int{0, 1}, rec.delivered["b"])
	rec.mu.Unlock()
	for _, id := range later {
		var worker sql.NullString
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT worker_id FROM events WHERE id = ?", id).Scan(&worker))
		require.True(t, worker.Valid, "task %d delivered by an event worker", id)
		require.NotEqual(t, full.ID, worker.String, "task %d, created after the worker filled, is another worker's", id)
	}
	for _, w := range allWorkers(t, ctx, store) {
		require.LessOrEqual(t, len(w.References), 2, "worker %s", w.ID)
		if w.WillTerminate {
			require.True(t, w.IsDone, "full worker %s done once its tasks are", w.ID)
		}
	}
	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks))
}

// Real racing clients: each reference's tasks are created one after the other while two agents'
// engines (an EventService each, WORKER_MAX_REFERENCES=2) deliver them, some after a 503, so that
// workers fill up while their references are busy and settlements promote next tasks as creates
// queue behind them. Throughout, no full worker is ever seen to take a task (its completed, failed
// and remaining tasks together never grow once it is willTerminate); at the end every reference's
// tasks were delivered in creation order, none attempted before the one before it was answered,
// each settled once, every full worker is done, and the books are exact.
func TestFullWorkersHandTheirReferencesOnUnderRacingCreates(t *testing.T) {
	t.Parallel()
	const refs, perRef = 8, 8
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rec, srv := newOrderReceiver(t, func(ref string, seq, n int) int {
		if seq%3 == 1 && n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})

	// The watcher: the size of each full worker when first seen full, and any growth after.
	var grew []string
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		sizes := map[string]int64{}
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			ws, err := store.Agents.ActiveWorkers(ctx)
			if err != nil {
				continue
			}
			for _, w := range ws {
				if !w.WillTerminate {
					continue
				}
				size := w.TasksCompleted + w.TasksFailed + w.TasksRemaining
				if first, ok := sizes[w.ID]; !ok {
					sizes[w.ID] = size
				} else if size > first {
					grew = append(grew, fmt.Sprintf("%s: %d tasks when full, %d later", w.ID, first, size))
					sizes[w.ID] = size
				}
			}
		}
	}()

	stop := make(chan struct{})
	var engines sync.WaitGroup
	for agent := int64(1); agent <= 2; agent++ {
		engines.Add(1)
		go func() {
			defer engines.Done()
			e := taskEngine(store, exactlyonce.BySweeper)
			e.Workers = &processing.EventService{Store: store.Agents, AgentID: func() int64 { return agent }, MaxReferences: 2}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.ProcessDue(ctx, 0, 5); err != nil {
					t.Errorf("agent %d: %v", agent, err)
					return
				}
			}
		}()
	}
	var creators sync.WaitGroup
	for r := range refs {
		creators.Add(1)
		go func() {
			defer creators.Done()
			ref := fmt.Sprintf("ref-%d", r)
			for k := range perRef {
				payload, _ := json.Marshal(orderPayload{Ref: ref, Seq: k})
				if _, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: srv.URL + "/hook", Payload: payload, ReferenceID: ref,
					MaxRetries: 3}}); err != nil {
					t.Errorf("create %s/%d: %v", ref, k, err)
					return
				}
			}
		}()
	}
	creators.Wait()
	testutil.Eventually(t, 2*time.Minute, "every task settled", func() bool {
		var open int
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM events WHERE state < 10").Scan(&open))
		return open == 0
	})
	close(stop)
	engines.Wait()
	close(stopWatch)
	<-watched

	require.Empty(t, grew, "a full worker took a task")
	rec.mu.Lock()
	require.Empty(t, rec.early)
	for r := range refs {
		want := make([]int, perRef)
		for k := range want {
			want[k] = k
		}
		require.Equal(t, want, rec.delivered[fmt.Sprintf("ref-%d", r)], "ref-%d", r)
	}
	rec.mu.Unlock()
	var wrong int
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx,
		"SELECT COUNT(*) FROM events WHERE kind = 'task' AND (state <> 10 OR process_count <> 1)").Scan(&wrong))
	require.Zero(t, wrong, "every task completed, once")
	full := 0
	for _, w := range allWorkers(t, ctx, store) {
		if w.WillTerminate {
			full++
			require.True(t, w.IsDone, "full worker %s done", w.ID)
		}
	}
	require.Positive(t, full, "workers filled up")
	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks))
}

// createReferenceTasks creates perRef tasks for each of refs references to hook, in rounds, with
// no retry (mysqltest.CreateReferenceTasks), and returns their ids in that order.
func createReferenceTasks(t *testing.T, ctx context.Context, store *wire.Stores, hook string, refs, perRef int) []int64 {
	t.Helper()
	ids, err := mysqltest.CreateReferenceTasks(ctx, store.Tasks, hook, refs, perRef, 0)
	require.NoError(t, err)
	return ids
}

// settleAll runs e's claims of due events until n tasks have settled (completed or failed for good).
func settleAll(t *testing.T, ctx context.Context, e *processing.Engine, n int) {
	t.Helper()
	for settled := 0; settled < n; {
		b, err := e.ProcessDue(ctx, 0, 50)
		require.NoError(t, err)
		settled += b.Settled + b.GaveUp
		require.NoError(t, ctx.Err())
	}
}
