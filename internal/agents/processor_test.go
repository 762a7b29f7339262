package agents_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// taskProcessor is the processor as functions/processor builds it: tasks delivered through an
// EventService of its own, under an agent without a range.
func taskProcessor(t testing.TB, store *wire.Stores, cfg config.Config, lease time.Duration, log *slog.Logger) *processing.Processor {
	client := webhook.New(webhook.Config{Key: testWebhookKey, AllowLoopback: true, Timeout: 5 * time.Second})
	p, err := wire.Processor(store, processing.Engine{Logger: log, Lease: lease,
		Tasks: &processing.Tasks{Deliverer: client, RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond}}, nil,
		wire.ProcessorEventWorkers(cfg, log))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// messages is an SQS batch naming ids, 100 a message, as the API's grouped sends make them.
func messages(ids []int64) events.SQSEvent {
	var ev events.SQSEvent
	for i := 0; i < len(ids); i += 100 {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: "m" + strconv.Itoa(i),
			Body: queue.EncodeIDs(ids[i:min(i+100, len(ids))])})
	}
	return ev
}

// runProcessorChild is a processor process handling one batch that names TASK_IDS, as a Lambda
// container would, with WORKER_MAX_REFERENCES and leases of LEASE.
func runProcessorChild() int {
	ctx, stop, cfg, store, ok := childStart()
	if !ok {
		return 2
	}
	defer stop()
	var ids []int64
	for _, s := range strings.Split(os.Getenv("TASK_IDS"), ",") {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "TASK_IDS:", err)
			return 2
		}
		ids = append(ids, id)
	}
	lease, _ := time.ParseDuration(os.Getenv("LEASE"))
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	p := taskProcessor(nopTB{}, store, cfg, lease, log)
	fmt.Println("started")
	if _, err := p.Handle(ctx, messages(ids)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(cctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("stopped")
	return 0
}

// nopTB stands in for testing.TB in a child process, where a failure is an exit.
type nopTB struct{ testing.TB }

func (nopTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(2)
}

// The processor (the SQS path) delivers tasks through its own EventService, as the agents do:
// WORKER_MAX_REFERENCES=3 and 10 references make at least 4 event workers (the heads fill three,
// and the tasks after a full worker's go to others), each run by the processor's agent, which is
// registered without a range; every settled task names its worker, and the books
// hold. When the processor stops, its workers are done and its agent row is gone.
func TestProcessorDeliversTasksThroughEventWorkers(t *testing.T) {
	t.Parallel()
	db, _ := testdbDB(t)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	const refs, perRef = 10, 4
	rec, url := newSeqReceiver(t, time.Millisecond)
	ids := createSeqTasks(t, store, url, refs, perRef)
	cfg := config.Config{Webhook: config.Webhook{WorkerMaxReferences: 3},
		Agent: config.Agent{Name: "processor-test", PulseInterval: 100 * time.Millisecond, Expiration: time.Second}}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := taskProcessor(t, store, cfg, 10*time.Second, log)
	ctx := context.Background()

	resp, err := p.Handle(ctx, messages(ids))
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	n, err := mysqltest.CountOpen(ctx, store.DB.Pool())
	require.NoError(t, err)
	require.Zero(t, n, "the batch delivered every task: the heads it claimed, the rest handed on")
	rec.check(t, refs, perRef)

	as, err := store.Agents.Agents(ctx)
	require.NoError(t, err)
	require.Len(t, as, 1)
	self := as[0]
	require.Equal(t, "processor", self.Kind)
	require.Equal(t, exactlyonce.ShardingNone, self.Sharding)
	require.Equal(t, exactlyonce.AgentRunning, self.State)
	require.Nil(t, self.TotalShardCount, "an agent without a range")

	require.NoError(t, verify.WorkerBooks(ctx, store.DB.Pool(), mysqltest.PackedTasks), "every settled task names its event worker")
	active, err := store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	done, err := store.Agents.DoneWorkers(ctx, 100)
	require.NoError(t, err)
	all := append(active, done...)
	// 10 references, 3 a worker: the heads fill three workers and start a fourth; a full worker takes
	// no new task, so the tasks after its heads go to a worker with room, or a new one.
	require.GreaterOrEqual(t, len(all), 4)
	var settled int64
	for _, w := range all {
		require.Equal(t, self.ID, w.AgentID, "worker %s is the processor's", w.ID)
		require.LessOrEqual(t, len(w.References), 3, "worker %s", w.ID)
		settled += w.TasksCompleted + w.TasksFailed
	}
	require.Equal(t, int64(refs*perRef), settled)

	require.NoError(t, p.Close(ctx))
	as, err = store.Agents.Agents(ctx)
	require.NoError(t, err)
	require.Empty(t, as, "the processor's agent left")
	active, err = store.Agents.ActiveWorkers(ctx)
	require.NoError(t, err)
	require.Empty(t, active, "its workers had nothing left: done when it stopped")
}

// An agent without a range takes no part in the split: a dynamic agent beside a processor's agent
// runs alone on the whole hash space (and is not suspended for mixing shardings), and static
// agents beside one run their shards.
func TestARangelessAgentTakesNoRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rangeless := func(store *wire.Stores) *agents.Rangeless {
		r, err := agents.NewRangeless(store.Agents, agents.MemberConfig{Name: "p", Kind: "processor"})
		require.NoError(t, err)
		require.NoError(t, r.Pulse(ctx))
		return r
	}
	t.Run("dynamic", func(t *testing.T) {
		t.Parallel()
		db, _ := testdbDB(t)
		store, err := wire.StoresOn(db, mysql.Config{})
		require.NoError(t, err)
		r := rangeless(store)
		m, err := agents.NewMember(store.Agents, memberConfig("dynamic"))
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			require.NoError(t, m.Pulse(ctx))
		}
		got, ok := m.Assignment()
		require.True(t, ok, "the dynamic agent runs: state %s", m.State())
		require.Equal(t, exactlyonce.AllHashes, got)
		require.NotZero(t, r.ID())
	})
	t.Run("static", func(t *testing.T) {
		t.Parallel()
		db, _ := testdbDB(t)
		store, err := wire.StoresOn(db, mysql.Config{})
		require.NoError(t, err)
		rangeless(store)
		a, b := staticMember(t, store, "s0", 0, 2), staticMember(t, store, "s1", 1, 2)
		pulseAll(t, 3, a, b)
		for _, m := range []*agents.Member{a, b} {
			_, ok := m.Assignment()
			require.True(t, ok, "static agent runs: state %s", m.State())
		}
	})
}

// SIGKILL of a processor while its event workers hold tasks: once its agent expires, an agent
// ejects it and adopts its workers; every reference's tasks reach the receiver in order, once
// each, and the registry's counts continue exactly.
func TestEventWorkersOfAKilledProcessorAreAdopted(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "WORKER_MAX_REFERENCES=3")
	rec, url := newSeqReceiver(t, 5*time.Millisecond)
	ids := createSeqTasks(t, c.store, url, seqRefs, seqPerRef)
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatInt(id, 10)
	}
	c.env = append(c.env, "TASK_IDS="+strings.Join(list, ","))
	c.startRole("processor")
	require.Eventually(t, func() bool { return rec.count() >= 40 }, 30*time.Second, 5*time.Millisecond)
	as, err := c.store.Agents.Agents(context.Background())
	require.NoError(t, err)
	require.Len(t, as, 1)
	require.Equal(t, exactlyonce.ShardingNone, as[0].Sharding)
	c.procs[0].Kill()
	held := workersOf(t, c.store, as[0].ID)
	require.NotEmpty(t, held, "the killed processor held event workers")
	require.Less(t, rec.count(), seqRefs*seqPerRef, "killed mid-delivery")

	c.startRole("eventworkers")
	var after []exactlyonce.Agent
	require.Eventually(t, func() bool {
		after, err = c.store.Agents.Agents(context.Background())
		return err == nil && converged(after, 1) && after[0].Name == "agent-1"
	}, 30*time.Second, 10*time.Millisecond, "the processor's agent was never ejected: %+v", &after)
	c.drained(60 * time.Second)
	rec.check(t, seqRefs, seqPerRef)
	require.NoError(t, verify.WorkerBooks(context.Background(), c.store.DB.Pool(), mysqltest.PackedTasks))
	requireAdopted(t, c.store, held, after[0].ID)
}

// A range-less agent pulses while a batch holds it, however long the batch: agents ejecting the
// expired ones leave it alone. Released, it sends nothing, expires and is ejected; its next batch
// registers it again under a new id, and what it held under the old one is forgotten (Reset).
func TestARangelessAgentLivesWhileHeldAndStartsOverOnceEjected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdbDB(t)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	// An expiration of ten pulses of half a second: a held agent is ejected only if its pulses stop,
	// not because a loaded machine held up a few (pulses of 100 ms all missed their deadline at a
	// load of 20, when a background pulse's deadline was its interval).
	r, err := agents.NewRangeless(store.Agents, agents.MemberConfig{Name: "p", Kind: "processor",
		PulseInterval: 500 * time.Millisecond, Expiration: 5 * time.Second})
	require.NoError(t, err)
	resets := 0
	r.Reset = func() { resets++ }
	other, err := agents.NewMember(store.Agents, memberConfig("ejector"))
	require.NoError(t, err)

	release, err := r.Hold(ctx)
	require.NoError(t, err)
	first := r.ID()
	require.NotZero(t, first)
	// Held for two expirations, while the other agent ejects whatever expired.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		require.NoError(t, other.Pulse(ctx))
		require.True(t, hasAgent(t, store, first), "a held range-less agent was ejected")
		time.Sleep(50 * time.Millisecond) // the ejector's pace, not synchronisation
	}
	require.Positive(t, r.Stats.Pulses.Load())
	release()

	require.Eventually(t, func() bool {
		require.NoError(t, other.Pulse(ctx))
		return !hasAgent(t, store, first)
	}, time.Minute, 50*time.Millisecond, "released, it expires and is ejected")
	require.Zero(t, resets)
	release, err = r.Hold(ctx)
	require.NoError(t, err)
	defer release()
	require.NotEqual(t, first, r.ID(), "registered again under a new id")
	require.Equal(t, 1, resets, "what it held under the old id was forgotten")
	require.Equal(t, int64(1), r.Stats.Ejected.Load())
}

func hasAgent(t *testing.T, store *wire.Stores, id int64) bool {
	as, err := store.Agents.Agents(context.Background())
	require.NoError(t, err)
	for _, a := range as {
		if a.ID == id {
			return true
		}
	}
	return false
}

// A background pulse that the database answers late, but within the agent's lease, succeeds: it is
// not cut at its pulse interval (it was, and failed and warned whenever a loaded database took
// longer than an interval). The test holds the agent's row while a pulse waits for it, for two
// intervals, then lets it go.
func TestASlowPulseOfAHeldAgentSucceeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdbDB(t)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	rec := &records{}
	const interval = 200 * time.Millisecond
	r, err := agents.NewRangeless(store.Agents, agents.MemberConfig{Name: "p", Kind: "processor",
		PulseInterval: interval, Expiration: 10 * interval, Logger: slog.New(rec)})
	require.NoError(t, err)
	release, err := r.Hold(ctx)
	require.NoError(t, err)
	defer release()

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, "UPDATE agents SET name = name WHERE id = ?", r.ID())
	require.NoError(t, err)
	pulses := r.Stats.Pulses.Load()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND INFO LIKE 'UPDATE agents SET expiration%'`).Scan(&n))
		return n > 0
	}, 30*time.Second, 5*time.Millisecond, "a pulse waits for the agent's row")
	held := time.NewTimer(2 * interval) // longer than an interval, within the lease
	<-held.C
	require.NoError(t, tx.Commit())
	require.Eventually(t, func() bool { return r.Stats.Pulses.Load() > pulses }, 30*time.Second, 5*time.Millisecond,
		"the pulse that waited succeeded")
	release()
	require.Zero(t, r.Stats.PulseFailures.Load())
	require.Empty(t, rec.atLeast(slog.LevelWarn), "the whole log:\n%s", rec.messages())
}
