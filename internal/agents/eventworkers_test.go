package agents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

var testWebhookKey = []byte("0123456789abcdef0123456789abcdef")

// taskEngine is an agent's engine that delivers tasks through an EventService, as cmd/agent's.
func taskEngine(store *wire.Stores, cfg config.Config, lease time.Duration, log *slog.Logger) *processing.Engine {
	client := webhook.New(webhook.Config{Key: testWebhookKey, AllowLoopback: true, Timeout: 5 * time.Second})
	return &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Logger: log, Lease: lease,
		Tasks: &processing.Tasks{Deliverer: client, RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond},
		Workers: &processing.EventService{Store: store.Agents, MaxReferences: cfg.Webhook.WorkerMaxReferences,
			Retention: cfg.Webhook.WorkerRetention, Logger: log}}
}

// runEventWorkersChild is an agent process that delivers tasks through its EventService
// (WORKER_MAX_REFERENCES), with leases of LEASE.
func runEventWorkersChild() int {
	ctx, stop, cfg, store, ok := childStart()
	if !ok {
		return 2
	}
	defer stop()
	lease, _ := time.ParseDuration(os.Getenv("LEASE"))
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	a, err := agents.New(store.Agents, taskEngine(store, cfg, lease, log), wire.AgentConfigs(cfg, "test", log)[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("started")
	_ = a.Run(ctx)
	fmt.Println("stopped")
	return 0
}

// seqReceiver is a webhook receiver on loopback that answers 200 after a pause, checks that no
// task of a reference is attempted before the one before it was answered, and records each
// reference's first deliveries.
type seqReceiver struct {
	mu        sync.Mutex
	final     map[string]int
	delivered map[string][]int
	early     []string
	total     int
	// before, when set, is called with each attempt before it is answered (after the early check):
	// it may block (until ctx, the request's, ends), and a status other than 0 or 200 answers the
	// attempt with it, unrecorded.
	before func(ctx context.Context, p seqPayload) int
}

// setBefore sets the receiver's before (see seqReceiver).
func (r *seqReceiver) setBefore(f func(ctx context.Context, p seqPayload) int) {
	r.mu.Lock()
	r.before = f
	r.mu.Unlock()
}

// seqPayload is a task's payload as createSeqTasks writes it: its reference and place.
type seqPayload = mysqltest.ReferencePayload

func newSeqReceiver(t *testing.T, pause time.Duration) (*seqReceiver, string) {
	r := &seqReceiver{final: map[string]int{}, delivered: map[string][]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var p seqPayload
		if err := json.NewDecoder(req.Body).Decode(&p); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		time.Sleep(pause) // the receiver's own latency, not synchronisation
		r.mu.Lock()
		last, ok := r.final[p.Ref]
		if !ok {
			last = -1
		}
		if p.Seq > last+1 {
			r.early = append(r.early, fmt.Sprintf("%s: task %d attempted before task %d was answered", p.Ref, p.Seq, last+1))
		}
		before := r.before
		r.mu.Unlock()
		if before != nil {
			if status := before(req.Context(), p); status != 0 && status != http.StatusOK {
				w.WriteHeader(status)
				return
			}
		}
		r.mu.Lock()
		if l, ok := r.final[p.Ref]; ok {
			last = l
		}
		if p.Seq == last+1 {
			r.final[p.Ref] = p.Seq
			r.delivered[p.Ref] = append(r.delivered[p.Ref], p.Seq)
		}
		r.total++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *seqReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// check: no early attempt, every reference's tasks delivered once each in order (a repeat of a
// delivered task, after a kill, is not counted again: it carries the same webhook-id).
func (r *seqReceiver) check(t *testing.T, refs, perRef int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.early)
	want := make([]int, perRef)
	for i := range want {
		want[i] = i
	}
	for i := 0; i < refs; i++ {
		require.Equal(t, want, r.delivered[fmt.Sprintf("ref-%d", i)], "ref-%d", i)
	}
}

// createSeqTasks creates perRef tasks for each of refs references, in order, with 3 retries each
// (mysqltest.CreateReferenceTasks), and returns their ids.
func createSeqTasks(t *testing.T, store *wire.Stores, url string, refs, perRef int) []int64 {
	t.Helper()
	ids, err := mysqltest.CreateReferenceTasks(context.Background(), store.Tasks, url, refs, perRef, 3)
	require.NoError(t, err)
	return ids
}

// workersOf returns the active event workers run by agent id.
func workersOf(t *testing.T, store *wire.Stores, id int64) []exactlyonce.EventWorker {
	t.Helper()
	ws, err := store.Agents.ActiveWorkers(context.Background())
	require.NoError(t, err)
	var out []exactlyonce.EventWorker
	for _, w := range ws {
		if w.AgentID == id {
			out = append(out, w)
		}
	}
	return out
}

// requireAdopted waits for (then checks) every one of ws to be run by agent to, unless it finished
// first: a worker is adopted while it is live, and one that a dying agent's last commit made done
// (nothing remaining) is left to its books. A worker with no open task left is adopted at one of the
// adopter's pulses, not before the tasks drain: waiting for the drain alone read one still under the
// killed agent (seen under load).
func requireAdopted(t *testing.T, store *wire.Stores, ws []exactlyonce.EventWorker, to int64) {
	t.Helper()
	for _, w := range ws {
		var last exactlyonce.EventWorker
		testutil.Eventually(t, time.Minute, fmt.Sprintf("worker %s is adopted by %d or done", w.ID, to), func() bool {
			got, ok, err := store.Agents.Worker(context.Background(), w.ID)
			require.NoError(t, err)
			require.True(t, ok)
			last = got
			return got.AgentID == to || got.IsDone && got.TasksRemaining <= 0
		})
		require.GreaterOrEqual(t, last.TasksCompleted+last.TasksFailed, w.TasksCompleted+w.TasksFailed, "counts continue")
	}
}

const seqRefs, seqPerRef = 10, 20

// SIGKILL of the only agent while its event workers hold tasks; a new agent starts: it adopts them
// (their agent expired), refills them from the task rows, and every reference's tasks reach the
// receiver in order, once each; the registry's counts continue exactly.
func TestEventWorkersSurviveSIGKILLAndRestart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "WORKER_MAX_REFERENCES=3")
	rec, url := newSeqReceiver(t, 5*time.Millisecond)
	createSeqTasks(t, c.store, url, seqRefs, seqPerRef)
	c.startRole("eventworkers")
	as := c.converge(1, 30*time.Second)
	require.Eventually(t, func() bool { return rec.count() >= 40 }, 30*time.Second, 5*time.Millisecond)
	c.procs[0].Kill()
	held := workersOf(t, c.store, as[0].ID)
	require.NotEmpty(t, held, "the killed agent held event workers")
	c.startRole("eventworkers")
	// The killed agent expired and was ejected, and the new one runs alone. (Until the new one has
	// registered, the killed one's row alone would look converged too.)
	var after []exactlyonce.Agent
	require.Eventually(t, func() bool {
		var err error
		after, err = c.store.Agents.Agents(context.Background())
		return err == nil && converged(after, 1) && after[0].Name == "agent-1"
	}, 30*time.Second, 10*time.Millisecond, "agent-1 never ran alone: %+v", &after)
	c.drained(60 * time.Second)
	rec.check(t, seqRefs, seqPerRef)
	require.NoError(t, verify.WorkerBooks(context.Background(), c.store.DB.Pool(), mysqltest.PackedTasks))
	requireAdopted(t, c.store, held, after[0].ID)
	require.NoError(t, syscall.Kill(c.procs[1].Pid(), syscall.SIGTERM))
	_, err := c.procs[1].WaitLine("stopped", 10*time.Second)
	require.NoError(t, err)
	active, err := c.store.Agents.ActiveWorkers(context.Background())
	require.NoError(t, err)
	require.Empty(t, active, "an agent leaving with nothing left leaves no live worker")
}

// SIGKILL of one of two agents: after its expiration the other adopts its event workers; the same
// checks. The agent killed is one that holds an event worker with room (not willTerminate): a full
// one is done once the survivor's claims settle its tasks, adopted or not, but one with room takes
// the next task of its references at each settlement and lives on under the dead agent until an
// adopter runs it (and, leaving, stops it). With ten references and at most three a worker, one of
// the two agents always holds one. (Killing agent-1 whatever it held, the test passed without any
// adoption whenever agent-1's references filled its workers.)
func TestEventWorkersOfAKilledAgentAreAdopted(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "WORKER_MAX_REFERENCES=3")
	rec, url := newSeqReceiver(t, 5*time.Millisecond)
	c.startRole("eventworkers")
	c.startRole("eventworkers")
	as := c.converge(2, 30*time.Second)
	createSeqTasks(t, c.store, url, seqRefs, seqPerRef)
	var victim, other exactlyonce.Agent
	var roomy string
	require.Eventually(t, func() bool {
		if rec.count() < 40 {
			return false
		}
		for i, a := range as {
			for _, w := range workersOf(t, c.store, a.ID) {
				if !w.WillTerminate {
					victim, other, roomy = a, as[1-i], w.ID
					return true
				}
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "an agent holds an event worker with room")
	var proc int
	_, err := fmt.Sscanf(victim.Name, "agent-%d", &proc)
	require.NoError(t, err)
	c.procs[proc].Kill()
	held := workersOf(t, c.store, victim.ID)
	require.NotEmpty(t, held)
	survivor := c.converge(1, 30*time.Second)
	require.Equal(t, other.ID, survivor[0].ID)
	c.drained(60 * time.Second)
	rec.check(t, seqRefs, seqPerRef)
	require.NoError(t, verify.WorkerBooks(context.Background(), c.store.DB.Pool(), mysqltest.PackedTasks))
	requireAdopted(t, c.store, held, other.ID)
	w, _, err := c.store.Agents.Worker(context.Background(), roomy)
	require.NoError(t, err)
	require.Equal(t, other.ID, w.AgentID, "the worker with room is the survivor's")
	require.Empty(t, workersOf(t, c.store, victim.ID), "no live event worker is left under the killed agent")
}

// A Lambda-shaped run: an invocation whose deadline arrives while its event workers hold tasks. It
// starts no delivery, and claims no task, once its deadline leaves less than TimeForTask (the cut),
// marks its workers willTerminate when it leaves, and the next invocation's agent adopts the workers
// that still hold tasks and finishes them. No task is lost or delivered out of order across the
// hand-over.
//
// Both ends are forced, not left to timing. Which workers hold tasks when an invocation leaves
// depends on where the cut finds each reference: a task settled for good with no time left promotes
// the next one into its worker if the worker has room (held), but into no worker if the worker is
// full (WORKER_MAX_REFERENCES: it is then done, and the task waits, pending, for any claim); and an
// invocation past its cut claims no task, so none joins a worker after it. So the receiver holds
// the first attempt of ref-0's second task until the cut and then fails it (503): the task waits
// its retry in its worker, which therefore holds a task whatever the packing, when the invocation
// leaves. The next invocation's claims could take a held worker's tasks (a claimed task keeps its
// worker) and finish it before the pulse that adopts it; so the receiver holds every delivery of
// the next invocation until each held worker has been adopted: no held worker can settle a task,
// and so become done, before that.
func TestEventWorkersHandOverAtALambdaDeadline(t *testing.T) {
	t.Parallel()
	db, _ := testdbDB(t)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	const refs, perRef = 10, 60
	rec, url := newSeqReceiver(t, 20*time.Millisecond)
	start := time.Now()
	createSeqTasks(t, store, url, refs, perRef)
	t.Logf("created %d tasks in %s", refs*perRef, time.Since(start))
	cfg := config.Config{Webhook: config.Webhook{WorkerMaxReferences: 4}}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	newEngine := func() *processing.Engine {
		e := taskEngine(store, cfg, 10*time.Second, log)
		e.Tasks.Timeout = 2 * time.Second // TimeForTask: 4 s
		return e
	}
	invocation := func(name string, hard, stop context.Context) *agents.Agent {
		ac := agents.Config{Member: agents.MemberConfig{Name: name, Kind: "sweeper", PulseInterval: 100 * time.Millisecond,
			Expiration: time.Second, Handover: true}, PollInterval: 20 * time.Millisecond, BatchSize: 20}
		a, err := agents.New(store.Agents, newEngine(), ac)
		require.NoError(t, err)
		require.NoError(t, a.RunUntil(hard, stop))
		return a
	}

	// The first invocation: an 8 s deadline, cut 4 s before it; it stops claiming 3 s before it
	// (after the cut: between the two it claims nothing), which leaves 3 s to leave.
	hard, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	deadline, _ := hard.Deadline()
	stop, cancelStop := context.WithDeadline(hard, deadline.Add(-3*time.Second))
	defer cancelStop()
	cut, cancelCut := context.WithDeadline(context.Background(), deadline.Add(-newEngine().TimeForTask()))
	defer cancelCut()
	held := make(chan struct{})
	var holdOnce sync.Once
	rec.setBefore(func(ctx context.Context, p seqPayload) int {
		if p.Ref != "ref-0" || p.Seq != 1 {
			return 0
		}
		first := false
		holdOnce.Do(func() { first = true; close(held) })
		if !first {
			return 0
		}
		select {
		case <-cut.Done():
		case <-ctx.Done():
		}
		return http.StatusServiceUnavailable
	})
	invocation("invocation-1", hard, stop)
	select {
	case <-held:
	default:
		t.Fatal("ref-0's second task was not attempted before the cut")
	}
	left, err := store.Agents.ActiveWorkers(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, left, "the deadline came while its workers held tasks")
	holdsRef0 := false
	for _, w := range left {
		require.Equal(t, left[0].AgentID, w.AgentID, "the first invocation's")
		require.True(t, w.WillTerminate, "worker %s was marked willTerminate at the deadline", w.ID)
		require.Positive(t, w.TasksRemaining)
		holdsRef0 = holdsRef0 || slices.Contains(w.References, "ref-0")
	}
	require.True(t, holdsRef0, "the worker of ref-0's failed task holds it: %+v", left)
	require.Positive(t, rec.count())
	require.NoError(t, verify.WorkerBooks(context.Background(), store.DB.Pool(), mysqltest.PackedTasks), "the books hold at the hand-over")

	// The next invocation adopts them and finishes; its deliveries wait for the adoption.
	adopted := make(chan struct{})
	rec.setBefore(func(ctx context.Context, _ seqPayload) int {
		select {
		case <-adopted:
			return 0
		case <-ctx.Done():
			return http.StatusServiceUnavailable
		}
	})
	ctx, cancel2 := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel2()
	stop2, cancelStop2 := context.WithCancel(ctx)
	defer cancelStop2()
	doneRun := make(chan struct{})
	go func() {
		defer close(doneRun)
		invocation("invocation-2", ctx, stop2)
	}()
	for _, w := range left {
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("worker %s is adopted", w.ID), func() bool {
			got, ok, err := store.Agents.Worker(context.Background(), w.ID)
			require.NoError(t, err)
			require.True(t, ok)
			require.False(t, got.IsDone, "worker %s settled no task before its adoption", w.ID)
			return got.AgentID != w.AgentID
		})
	}
	close(adopted)
	require.Eventually(t, func() bool {
		n, err := mysqltest.CountOpen(context.Background(), store.DB.Pool())
		return err == nil && n == 0
	}, 60*time.Second, 20*time.Millisecond)
	for _, w := range left {
		got, ok, err := store.Agents.Worker(context.Background(), w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, got.IsDone, "worker %s finished", w.ID)
		require.NotEqual(t, w.AgentID, got.AgentID, "worker %s was adopted", w.ID)
	}
	cancelStop2()
	<-doneRun
	rec.check(t, refs, perRef)
	require.NoError(t, verify.WorkerBooks(context.Background(), store.DB.Pool(), mysqltest.PackedTasks))
	active, err := store.Agents.ActiveWorkers(context.Background())
	require.NoError(t, err)
	require.Empty(t, active)
}
