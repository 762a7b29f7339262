package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// blockingDeliverer holds every delivery until its context ends: an agent that dies holding tasks.
type blockingDeliverer struct{ started atomic.Int64 }

func (d *blockingDeliverer) Deliver(ctx context.Context, _ webhook.Request) webhook.Result {
	d.started.Add(1)
	<-ctx.Done()
	return webhook.Result{Outcome: webhook.Temporary, Message: "cut short", Started: time.Now()}
}

// runTaskWorkers measures the event workers (processing.EventService) on a scratch database of its
// own: the same ordered tasks drained by one engine with the registry's bookkeeping and without it,
// alternating rounds; and the recovery, the time from an agent's start to its first delivery with
// 10,000 tasks held by the event workers of an agent that is gone.
func (r *run) runTaskWorkers(ctx context.Context, group string) error {
	store, _, done, err := r.scratchStore(ctx, "workers", 16)
	if err != nil {
		return err
	}
	defer done()
	var delivered atomic.Int64
	var firstAt atomic.Pointer[time.Time]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if delivered.Add(1) == 1 {
			now := time.Now()
			firstAt.Store(&now)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true})
	create := func(tag string, refs, perRef int) error {
		for k := 0; k < perRef; k++ {
			batch := make([]exactlyonce.NewTask, 0, refs)
			for i := 0; i < refs; i++ {
				payload, _ := json.Marshal(map[string]int{"seq": k})
				batch = append(batch, exactlyonce.NewTask{URL: srv.URL, Payload: payload, ReferenceID: fmt.Sprintf("%s-%d", tag, i)})
			}
			for len(batch) > 0 {
				n := min(len(batch), 200) // the most one create takes
				if _, err := store.Tasks.CreateTasks(ctx, batch[:n]); err != nil {
					return err
				}
				batch = batch[n:]
			}
		}
		return nil
	}
	refs, perRef := pick(r, 500, 20), pick(r, 20, 5)
	drain := func(tag string, withWorkers bool) (time.Duration, error) {
		if err := create(tag, refs, perRef); err != nil {
			return 0, err
		}
		e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Tasks: &processing.Tasks{Deliverer: client}}
		if withWorkers {
			e.Workers = &processing.EventService{Store: store.Agents, AgentID: func() int64 { return 1 }}
		}
		start := time.Now()
		for settled := 0; settled < refs*perRef; {
			b, err := e.ProcessDue(ctx, 0, 200)
			if err != nil {
				return 0, err
			}
			settled += b.Settled + b.GaveUp
		}
		if withWorkers {
			if err := e.Workers.Stop(ctx); err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	}
	// A warm-up drain of each, not counted: the first drain of a scratch database ran up to 1.8x
	// slower than the next, and it was always the one with event workers. Then six rounds each, in
	// alternating order: a round is about 2 s on a machine whose throughput drifts 10-30 % within a
	// minute.
	if !r.smoke() {
		for _, w := range []bool{true, false} {
			if _, err := drain(fmt.Sprintf("warm-%t", w), w); err != nil {
				return err
			}
		}
	}
	rounds := pick(r, 6, 1)
	var with, without time.Duration
	for round := range rounds {
		order := []bool{true, false}
		if round%2 == 1 {
			order = []bool{false, true}
		}
		for _, w := range order {
			took, err := drain(fmt.Sprintf("r%d-%t", round, w), w)
			if err != nil {
				return err
			}
			r.progress(group, "event workers %-5t: %d tasks over %d references in %.2f s (%.0f tasks/s)", w, refs*perRef, refs,
				took.Seconds(), float64(refs*perRef)/took.Seconds())
			if w {
				with += took
			} else {
				without += took
			}
		}
	}
	n := float64(rounds * refs * perRef)
	withRow := Row{Group: group, Name: "tasks_event_workers_tps", Value: n / with.Seconds(), Unit: "tasks/s",
		Note: fmt.Sprintf("%d tasks over %d references per round, %d rounds, one engine draining them through the EventService (assignment and settlement bookkeeping in event_workers); a receiver that answers at once", refs*perRef, refs, rounds)}
	withoutRow := Row{Group: group, Name: "tasks_event_workers_off_tps", Value: n / without.Seconds(), Unit: "tasks/s",
		Note: "the same tasks, alternating rounds, the engine without an EventService (the contender: no registry)"}
	r.add(withRow, withoutRow, ratio(group, "tasks_event_workers_ratio", withRow, withoutRow, atLeast(0.9),
		"delivery through the EventService vs with the registry's bookkeeping off"))
	if err := r.runProcessorWorkers(ctx, group, store, srv.URL); err != nil {
		return err
	}
	return r.runWorkerRecovery(ctx, group, store, create, &delivered, &firstAt)
}

// runWorkerRecovery: about 10,000 tasks held by the event workers of a dead agent (agent id 0 is never
// registered); an agent starts, adopts them and delivers: the time from its start to its first
// delivery, and to the last.
func (r *run) runWorkerRecovery(ctx context.Context, group string, store *wire.Stores, create func(string, int, int) error,
	delivered *atomic.Int64, firstAt *atomic.Pointer[time.Time]) error {
	// As many references as one claim takes tasks (eventstore.MaxClaimTasks), so that the dead
	// agent's one claim holds a head of each.
	refs := pick(r, eventstore.MaxClaimTasks, 50)
	perRef := pick(r, 10000/refs, 20)
	if err := create("dead", refs, perRef); err != nil {
		return err
	}
	// The dead agent: its engine claims every head, assigns them to its event workers, and dies in
	// the middle of their deliveries (they are released, their workers stay live).
	blocked := &blockingDeliverer{}
	dead := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Tasks: &processing.Tasks{Deliverer: blocked, Concurrency: refs},
		Workers: &processing.EventService{Store: store.Agents, AgentID: func() int64 { return -1 }}}
	dctx, kill := context.WithCancel(ctx)
	go func() {
		for blocked.started.Load() < int64(refs) && dctx.Err() == nil {
			time.Sleep(time.Millisecond) // polling a counter of the dead agent's deliveries under way
		}
		kill()
	}()
	if _, err := dead.ProcessDue(dctx, 0, refs); err != nil && dctx.Err() == nil {
		kill()
		return err
	}
	kill()
	held, err := store.Agents.ActiveWorkers(ctx)
	if err != nil {
		return err
	}
	delivered.Store(0)
	firstAt.Store(nil)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true})
	e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Logger: log, Tasks: &processing.Tasks{Deliverer: client},
		Workers: &processing.EventService{Store: store.Agents, Logger: log}}
	start := time.Now()
	a, err := agents.New(store.Agents, e, agents.Config{Member: agents.MemberConfig{Name: "bench-recovery", Kind: "standalone",
		PulseInterval: 200 * time.Millisecond, Expiration: time.Second, Logger: log}, PollInterval: 50 * time.Millisecond, BatchSize: 200})
	if err != nil {
		return err
	}
	actx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(actx)
	}()
	deadline := time.Now().Add(pick(r, 5*time.Minute, time.Minute))
	for delivered.Load() < int64(refs*perRef) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling the receiver's count
	}
	drained := time.Since(start)
	stop()
	<-done
	first := firstAt.Load()
	r.check(group, "recovery: every task held by the dead agent's event workers delivered", delivered.Load() >= int64(refs*perRef),
		fmt.Sprintf("%d of %d delivered", delivered.Load(), refs*perRef))
	adopted := 0
	for _, w := range held {
		got, ok, err := store.Agents.Worker(ctx, w.ID)
		if err == nil && ok && got.AgentID != w.AgentID {
			adopted++
		}
	}
	r.check(group, "recovery: every live event worker of the dead agent adopted", adopted == len(held),
		fmt.Sprintf("%d of %d adopted", adopted, len(held)))
	if first == nil {
		return fmt.Errorf("recovery: no delivery")
	}
	r.add(Row{Group: group, Name: "tasks_worker_recovery_first_ms", Value: ms(first.Sub(start)), Unit: "ms",
		Note: fmt.Sprintf("%d tasks over %d references held by %d event workers of a dead agent: from a new agent's start (registration, first pulse, adoption) to its first delivery; all delivered in %.2f s",
			refs*perRef, refs, len(held), drained.Seconds())})
	return nil
}
