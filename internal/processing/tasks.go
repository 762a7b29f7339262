package processing

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
)

// Deliverer makes one delivery attempt of a task (internal/webhook's Client).
type Deliverer interface {
	Deliver(ctx context.Context, r webhook.Request) webhook.Result
}

// Tasks configures an engine's delivery of tasks. An engine without it (or without a Deliverer)
// does not claim tasks: they wait for an engine that delivers them. An engine with it settles them
// in its TaskStore.
type Tasks struct {
	Deliverer Deliverer
	// RetryBase and RetryMax shape the backoff of temporary failures (webhook.RetryDelay; zero:
	// its defaults).
	RetryBase, RetryMax time.Duration
	// Timeout is the longest one delivery takes (the Deliverer's; default webhook.DefaultTimeout): a
	// engine starts no delivery, and takes over no next task of a reference, unless its deadline
	// leaves that long plus a margin. What it cannot start is released, pending, for another claim.
	Timeout time.Duration
	// Concurrency bounds the deliveries in flight at once (default 64): tasks of different
	// references are delivered concurrently, a reference's tasks one after the other.
	Concurrency int
	// SettleLinger is how long a settlement waits for the outcomes of other deliveries to settle
	// them in one transaction (default 2 ms).
	SettleLinger time.Duration
}

// taskSettleBatch is the most outcomes one settlement transaction records.
const taskSettleBatch = 200

// deadlineMargin is kept, beyond a delivery's timeout, for the settlement after it.
const deadlineMargin = 2 * time.Second

func (t *Tasks) timeout() time.Duration { return cmp.Or(t.Timeout, webhook.DefaultTimeout) }

// TimeForTask is the least time a deadline must leave for the engine to take a task (and to take
// over the next task of a reference): one delivery's timeout and the margin for its settlement.
// Zero when the engine delivers no task. A loop that bounds its batches by a timeout of its own
// (an agent's BatchTimeout) must give them more than this, or it never delivers a task.
func (e *Engine) TimeForTask() time.Duration {
	if !e.delivers() {
		return 0
	}
	return e.Tasks.timeout() + deadlineMargin
}

// stopKey is the context key of Stopping's stop.
type stopKey struct{}

// Stopping returns ctx told that its process is stopping once stop ends: from then on the task
// path starts no delivery. The deliveries under way finish and are settled under ctx, and the task
// each settlement hands on is left pending for any claim, where the chain would go on delivering a
// busy reference's tasks for as long as ctx's deadline allows (an agent's batch runs to its end
// after SIGTERM, under a context that SIGTERM does not end).
func Stopping(ctx, stop context.Context) context.Context {
	return context.WithValue(ctx, stopKey{}, stop)
}

// timeFor tells whether ctx leaves time for one more delivery and its settlement, and its process
// is not stopping (Stopping).
func (t *Tasks) timeFor(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	if stop, ok := ctx.Value(stopKey{}).(context.Context); ok && stop.Err() != nil {
		return false
	}
	d, ok := ctx.Deadline()
	return !ok || time.Until(d) > t.timeout()+deadlineMargin
}

// WebhookID is the webhook-id of every delivery of task id: stable across its attempts (and across
// workers), so that a receiver can drop a duplicate.
func WebhookID(id int64) string { return "task_" + strconv.FormatInt(id, 10) }

// taskWorked is what the task path did.
type taskWorked struct {
	completed, gaveUp, retrying, released []int64
	// chained counts the tasks of the claim's references delivered after the ones claimed: they were
	// handed on to this claim by the settlement of the task before them.
	chained int
}

// workTasks delivers tasks leased to claim c: every reference at once (up to Concurrency deliveries
// in flight), and, as each task settles, the next task of its reference, handed on to this claim by
// the settlement, while the deadline allows. No row lock is held across a delivery: the lease keeps
// other claims off, the settlement is a short transaction guarded by it.
func (e *Engine) workTasks(ctx context.Context, c exactlyonce.Claim, leasedAt time.Time, tasks []exactlyonce.Event) taskWorked {
	cfg := e.Tasks
	st := &taskSettler{e: e, c: c, cfg: cfg, in: make(chan settleRequest), fin: make(chan struct{})}
	go st.run(ctx)
	if e.Workers != nil {
		assigned, err := e.Workers.assign(ctx, c.ID, tasks)
		if err != nil {
			// Without its event worker a task is not delivered: it goes back, pending, for the next claim.
			e.logger().Warn(e.By+": event worker assignment failed; the tasks are released", "tasks", len(tasks), "err", err)
			for _, t := range tasks {
				st.release(t)
			}
			tasks = nil
		} else {
			tasks = assigned
		}
	}
	sem := make(chan struct{}, cmp.Or(cfg.Concurrency, 64))
	var wg sync.WaitGroup
	for _, t := range tasks {
		wg.Add(1)
		go func(t exactlyonce.Event) {
			defer wg.Done()
			e.deliverChain(ctx, c, leasedAt, t, st, sem)
		}(t)
	}
	wg.Wait()
	close(st.in)
	<-st.fin
	return st.worked
}

// deliverChain delivers t, then each next task of its reference that the settlements hand on.
// leasedAt is a moment before t's lease began (the claim's, or the settlement's that handed it on).
// Every delivery ends by its task's lease (leaseEnd): one whose lease has run out by the time it
// may start (it waited for a slot of Concurrency behind other deliveries) is released without
// starting, and one that would outlive it is cut there, a temporary failure. A lease that expired
// while its delivery went on let another claim take the task and deliver it at the same moment,
// and settle it and promote the next task of its reference while the first delivery of the old
// one still ran (TestNoDeliveryRunsUnderAnExpiredLease).
func (e *Engine) deliverChain(ctx context.Context, c exactlyonce.Claim, leasedAt time.Time, t exactlyonce.Event, st *taskSettler, sem chan struct{}) {
	cfg := e.Tasks
	rec := metrics.From(ctx)
	for first := true; ; first = false {
		if !cfg.timeFor(ctx) {
			st.release(t)
			return
		}
		sem <- struct{}{}
		end := leaseEnd(leasedAt, c.Lease)
		if !time.Now().Before(end) {
			<-sem
			st.release(t) // its lease ran out while it waited for a slot: another claim's now
			return
		}
		dctx, cancel := context.WithDeadlineCause(ctx, end, errLeaseEnds)
		res := cfg.Deliverer.Deliver(dctx, webhook.Request{ID: WebhookID(t.ID), URL: t.Task.URL, Payload: t.Task.Payload})
		cancel()
		<-sem
		if res.Outcome == webhook.Temporary && ctx.Err() != nil {
			st.release(t) // cut short by the deadline: not the receiver's failure
			return
		}
		rec.ObserveDuration(metrics.TaskDeliveryLatency, res.Duration)
		if res.Outcome == webhook.Delivered {
			rec.Add(metrics.TaskDelivered, 1)
		} else {
			rec.Add(metrics.TaskDeliveryFailed, 1)
		}
		if !first {
			st.chained()
		}
		leasedAt = time.Now() // before the settlement, which leases the next task it hands on
		next, ok := st.settle(e.outcome(t, res))
		if !ok {
			return
		}
		t = next
	}
}

// errLeaseEnds is why a delivery was cut at its task's lease (its exceptionMessage, after "stopped
// before an answer: ").
var errLeaseEnds = errors.New("the task's lease ended: no answer within the time its claim holds the task")

// leaseEnd is when a delivery of a task leased for lease at leasedAt must have ended: the lease's end
// less a margin for the settlement that follows (deadlineMargin, or a quarter of a lease shorter
// than four of them), so that no other claim can take the task before it is settled.
func leaseEnd(leasedAt time.Time, lease time.Duration) time.Time {
	return leasedAt.Add(lease - min(deadlineMargin, lease/4))
}

// outcome is the settlement's view of one attempt. Attempts are numbered across the task's life
// (a manual retry continues the numbering); its retry budget counts those since its last manual
// retry (RetryBase), each of which gives it MaxRetries retries afresh.
func (e *Engine) outcome(t exactlyonce.Event, res webhook.Result) exactlyonce.TaskOutcome {
	attempt := t.Attempts + 1
	o := exactlyonce.TaskOutcome{Event: t, Attempt: exactlyonce.Attempt{Number: attempt, Started: res.Started,
		Duration: res.Duration, Status: res.Status, Error: res.Message}}
	inBudget := attempt - t.Task.RetryBase // the attempt's number within this budget, from 1
	switch {
	case res.Outcome == webhook.Delivered:
		o.Delivered = true
	case res.Outcome == webhook.Temporary && inBudget <= t.Task.MaxRetries:
		o.Wait = webhook.RetryDelay(inBudget, e.Tasks.RetryBase, e.Tasks.RetryMax, res.RetryAfter)
	default: // permanent, refused, or the retries are spent
		o.Final = true
	}
	return o
}

type settleRequest struct {
	o     exactlyonce.TaskOutcome
	reply chan *exactlyonce.Event
}

// taskSettler settles the outcomes of a claim's concurrent deliveries in groups: one short
// transaction records every outcome that arrived while the last one ran (or within SettleLinger).
type taskSettler struct {
	e   *Engine
	c   exactlyonce.Claim
	cfg *Tasks
	in  chan settleRequest
	fin chan struct{} // closed when run has settled and released everything

	mu        sync.Mutex
	worked    taskWorked
	toRelease []int64
}

func (st *taskSettler) chained() {
	st.mu.Lock()
	st.worked.chained++
	st.mu.Unlock()
}

func (st *taskSettler) release(t exactlyonce.Event) {
	st.mu.Lock()
	st.toRelease = append(st.toRelease, t.ID)
	st.mu.Unlock()
}

// settle hands o to the settler and waits for its transaction: it returns the next task of o's
// reference if the settlement handed it on to this claim.
func (st *taskSettler) settle(o exactlyonce.TaskOutcome) (exactlyonce.Event, bool) {
	r := settleRequest{o: o, reply: make(chan *exactlyonce.Event, 1)}
	st.in <- r
	next := <-r.reply
	if next == nil {
		return exactlyonce.Event{}, false
	}
	return *next, true
}

func (st *taskSettler) run(ctx context.Context) {
	defer close(st.fin)
	linger := cmp.Or(st.cfg.SettleLinger, 2*time.Millisecond)
	for {
		first, ok := <-st.in
		if !ok {
			break
		}
		group := []settleRequest{first}
		timer := time.NewTimer(linger)
	gather:
		for len(group) < taskSettleBatch {
			select {
			case r, ok := <-st.in:
				if !ok {
					break gather
				}
				group = append(group, r)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		st.flush(ctx, group)
	}
	st.mu.Lock()
	release := st.toRelease
	st.mu.Unlock()
	if len(release) > 0 {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterWorkTimeout)
		defer cancel()
		if err := st.e.Store.Release(sctx, st.c.ID, release); err != nil {
			st.e.logger().Warn(st.e.By+": release failed; the tasks are claimable when their lease expires", "tasks", len(release), "err", err)
		}
		st.mu.Lock()
		st.worked.released = append(st.worked.released, release...)
		st.mu.Unlock()
	}
}

// assignNext gives an event worker to the tasks the settlement handed on to this claim behind a
// full event worker (they joined none: a full one takes no new task), one assignment for the group,
// as a claim's tasks get theirs. A task it cannot assign is released, pending, for the next claim,
// and not delivered here.
func (st *taskSettler) assignNext(ctx context.Context, next []exactlyonce.Event) []exactlyonce.Event {
	w := st.e.Workers
	if w == nil {
		return next
	}
	var bare []exactlyonce.Event
	for _, n := range next {
		if n.Task.ReferenceID != "" && n.Task.WorkerID == "" {
			bare = append(bare, n)
		}
	}
	if len(bare) == 0 {
		return next
	}
	assigned, err := w.assign(ctx, st.c.ID, bare)
	if err != nil {
		st.e.logger().Warn(st.e.By+": event worker assignment failed; the tasks are released", "tasks", len(bare), "err", err)
		for _, t := range bare {
			st.release(t)
		}
		return slices.DeleteFunc(next, func(n exactlyonce.Event) bool {
			return n.Task.ReferenceID != "" && n.Task.WorkerID == ""
		})
	}
	worker := make(map[int64]*exactlyonce.Task, len(assigned))
	for _, a := range assigned {
		worker[a.ID] = a.Task
	}
	for i := range next {
		if t, ok := worker[next[i].ID]; ok {
			next[i].Task = t
		}
	}
	return next
}

// flush settles one group and answers each request with the next task of its reference, if any.
func (st *taskSettler) flush(ctx context.Context, group []settleRequest) {
	outcomes := make([]exactlyonce.TaskOutcome, len(group))
	for i, r := range group {
		outcomes[i] = r.o
	}
	// Settle even if ctx has just ended: the deliveries are done, and the settlement is short.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterWorkTimeout)
	defer cancel()
	chain := st.cfg.timeFor(ctx)
	var res exactlyonce.TaskSettlement
	var err error
	if w := st.e.Workers; w != nil && chain {
		// The tasks handed on behind a full event worker get theirs in the settlement's transaction,
		// not in an assignment's of their own after it (assignNext is left for a settlement that
		// could not draft them).
		res, err = drafting(w, func(d *exactlyonce.DraftWorkers) (exactlyonce.TaskSettlement, error) {
			return st.e.TaskStore.SettleTasksDrafting(sctx, st.c, outcomes, chain, d)
		})
	} else {
		res, err = st.e.TaskStore.SettleTasksDrafting(sctx, st.c, outcomes, chain, nil)
	}
	if err != nil {
		// The tasks stay leased until their lease expires; then they are delivered again.
		st.e.logger().Error(st.e.By+": task settlement failed; the tasks are delivered again after their lease",
			"tasks", len(group), "err", err)
		for _, r := range group {
			r.reply <- nil
		}
		return
	}
	st.e.reportSettled(st.c.ID, append(append([]int64(nil), res.Completed...), res.GaveUp...))
	st.mu.Lock()
	st.worked.completed = append(st.worked.completed, res.Completed...)
	st.worked.gaveUp = append(st.worked.gaveUp, res.GaveUp...)
	st.worked.retrying = append(st.worked.retrying, res.Retrying...)
	st.mu.Unlock()
	res.Next = st.assignNext(sctx, res.Next)
	next := map[string]*exactlyonce.Event{}
	for i := range res.Next {
		n := &res.Next[i]
		next[n.Task.ReferenceID] = n
	}
	for _, r := range group {
		var n *exactlyonce.Event
		if t := r.o.Event.Task; t.ReferenceID != "" {
			n = next[t.ReferenceID]
			delete(next, t.ReferenceID)
		}
		r.reply <- n
	}
	// A next task whose reference had two outcomes in the group (cannot happen: one reference has one
	// task open at a time) would stay leased until its lease expires.
}
