// Package processing is the one processing shape that every path takes (the processor, the
// sweeper's agents, the standalone agent, the local runner): claim, work, settle. The engine
// decides; the stores lock, mark, lease and record.
//
//   - Claim: the store locks the claimable rows (SKIP LOCKED) and, in that transaction, calls the
//     engine's Decide (decide.go) with them. Decide picks each event's work and says what becomes
//     of it: inline work (in-process, short) is done there and the event settled or its failure
//     recorded, in the claim's own transaction (the drain's fast path: one transaction per batch);
//     other work, and every task the engine delivers, is leased; an event no one here can work is
//     left as it is.
//   - Work: leased events are worked outside any transaction (engine.go: Work.Do; tasks.go: the
//     webhook deliveries, concurrent across references, in order within one).
//   - Settle: a short transaction guarded by the lease holder records what the engine decided
//     (the value; the failure, its backoff or its end, from Backoff or the task's retry budget;
//     the release of what was not started), and, for tasks, the attempt and the reference's next
//     task.
//
// The SQS processor is built on it here (processor.go); the sweeper in internal/sweeping.
package processing

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// Store is what processing needs of the events (internal/mysql/eventstore implements it): claims,
// settlements and what an id a claim did not take is. It decides nothing: a claim writes what
// decide returns, a settlement what the engine gives it.
type Store interface {
	// ClaimIDs claims those of the named events that are claimable and that nobody else holds, and
	// writes, in the claim's transaction, what decide says of each.
	ClaimIDs(ctx context.Context, c exactlyonce.Claim, ids []int64, decide exactlyonce.Decide) (exactlyonce.Claimed, error)
	// ClaimDue claims up to limit due events (pending for longer than grace, or leased with an
	// expired lease), and writes, in the claim's transaction, what decide says of each.
	ClaimDue(ctx context.Context, c exactlyonce.Claim, grace time.Duration, limit int, decide exactlyonce.Decide) (exactlyonce.Claimed, error)
	// Settle settles events leased to claimID and returns those it settled.
	Settle(ctx context.Context, claimID, by string, results map[int64]exactlyonce.Result) ([]int64, error)
	// Release gives events leased to claimID back, pending, with no attempt counted.
	Release(ctx context.Context, claimID string, ids []int64) error
	// Fail records failed attempts of events leased to claim c, as the engine decided them, and
	// returns those failed for good.
	Fail(ctx context.Context, c exactlyonce.Claim, failures map[int64]exactlyonce.Failure) ([]int64, error)
	// Outcomes tells, for ids a claim did not take, whether each is settled, busy or missing.
	Outcomes(ctx context.Context, ids []int64) (map[int64]exactlyonce.Outcome, error)
}

// TaskStore is what the delivery of tasks needs of the tasks' store (internal/mysql/taskstore
// implements it).
type TaskStore interface {
	// SettleTasksDrafting records the outcomes of delivery attempts of tasks leased to claim c, and
	// hands each reference whose task settled on to its next task (leased to c when chain is set);
	// with draft, it gives the tasks it hands on behind an event worker with no room the workers
	// draft drafts, in the same transaction (exactlyonce.DraftWorkers).
	SettleTasksDrafting(ctx context.Context, c exactlyonce.Claim, outcomes []exactlyonce.TaskOutcome, chain bool,
		draft *exactlyonce.DraftWorkers) (exactlyonce.TaskSettlement, error)
}

// Reporter hears, from the process itself, of every settlement its engine makes: the exactly-once
// checker (internal/verify) counts these reports instead of trusting the table it checks. A
// process that is killed between a commit and its report leaves a Claiming without a Settled; the
// checker resolves those with the claim id the table records on every settled event.
type Reporter interface {
	// Claiming is told a claim's id before any transaction of that claim can settle an event.
	Claiming(claimID string)
	// Settled is told the events a claim settled, after the transaction that settled them committed.
	Settled(claimID string, ids []int64)
}

// DefaultLease is how long leased events are held by their claim before another may claim them. It
// bounds how long an event whose claiming process died waits; it must exceed the longest work (a webhook's
// timeout) and the time from claim to settlement.
const DefaultLease = 2 * time.Minute

// Engine processes events in the one shape: claim, work, settle.
type Engine struct {
	Store Store
	// TaskStore settles the tasks the engine delivers: required with Tasks.
	TaskStore TaskStore
	// By names the path: exactlyonce.ByProcessor or BySweeper.
	By string
	// Works gives each kind its work. Default exactlyonce.DefaultWorks().
	Works exactlyonce.Works
	// Lease is how long leased events are held. Default DefaultLease.
	Lease time.Duration
	// Backoff says how often failed work is tried again and after how long (exactlyonce.Backoff's
	// defaults: 5 attempts, 1 s doubling up to 5 min, full jitter).
	Backoff exactlyonce.Backoff
	// Report, when set, hears of every settlement (an event failed for good is settled too).
	Report Reporter
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Tasks, when set with a Deliverer, makes the engine deliver tasks (tasks.go). Without it the
	// engine claims no task.
	Tasks *Tasks
	// Workers, when set, packs the tasks the engine delivers into event workers and keeps their
	// registry (eventservice.go). Nil: tasks are delivered without the registry's bookkeeping.
	Workers *EventService
}

// claim starts one claim: its id (told to Report before anything of it can settle), with the works
// and the backoff its decisions use.
func (e *Engine) claim() claimRun {
	r := claimRun{Claim: exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: e.By, Lease: cmp.Or(e.Lease, DefaultLease)},
		works: e.Works, backoff: e.Backoff.WithDefaults(), delivers: e.delivers(), leasedAt: time.Now()}
	r.tasks = r.delivers
	if r.works == nil {
		r.works = exactlyonce.DefaultWorks()
	}
	if e.Report != nil {
		e.Report.Claiming(r.ID)
	}
	return r
}

// claimDrafting runs claim, c's transaction: with event workers, when it leases tasks, it gives
// them their event workers in that transaction (Claim.Workers, drafted by e.Workers), so that their
// delivery starts with no assignment's transaction of its own (workTasks assigns only what it could
// not draft).
func (e *Engine) claimDrafting(c claimRun, claim func(exactlyonce.Claim) (exactlyonce.Claimed, error)) (exactlyonce.Claimed, error) {
	if e.Workers == nil || !c.tasks {
		return claim(c.Claim)
	}
	return drafting(e.Workers, func(d *exactlyonce.DraftWorkers) (exactlyonce.Claimed, error) {
		cl := c.Claim
		cl.Workers = d
		return claim(cl)
	})
}

func (e *Engine) logger() *slog.Logger { return cmp.Or(e.Logger, slog.Default()) }

// delivers tells whether the engine delivers tasks.
func (e *Engine) delivers() bool { return e.Tasks != nil && e.Tasks.Deliverer != nil }

func (e *Engine) reportSettled(claimID string, ids []int64) {
	if e.Report != nil && len(ids) > 0 {
		e.Report.Settled(claimID, ids)
	}
}

// ProcessIDs processes the named events that are claimable and that nobody else holds, and says
// for every id what happened. An id may appear more than once; it is settled at most once. The
// error is for the claim as a whole: the claim's transaction failed, and nothing was settled or
// leased by it (unless the commit's answer was lost; then its events are settled or leased, and
// their messages come back and find them so).
//
// One claim holds at most eventstore.MaxClaimTasks tasks (their payloads are in memory together):
// the tasks of ids beyond them are left out of it, and taken by the next claim, one after the
// other, while ctx's deadline leaves the time for a delivery. A task still left out then is
// deferred: pending, for the next claim that names it or a claim of due events. Its message is not
// failed for it, which would bring it back after the visibility timeout and count it towards the
// DLQ.
func (e *Engine) ProcessIDs(ctx context.Context, ids []int64) (map[int64]exactlyonce.Outcome, error) {
	out, left, err := e.processClaim(ctx, ids)
	for err == nil && len(left) > 0 && e.timeForAnotherClaim(ctx) {
		more, rest, err := e.processClaim(ctx, left)
		if err != nil {
			// The claims before committed; the tasks left out stay deferred, pending.
			e.logger().Warn(e.By+": could not claim the tasks one claim left out; they stay pending", "events", len(left), "err", err)
			break
		}
		maps.Copy(out, more)
		left = rest
	}
	return out, err
}

// timeForAnotherClaim tells whether ctx leaves the time for another claim of tasks: it is not done,
// and its deadline, if any, is further than one delivery.
func (e *Engine) timeForAnotherClaim(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	d, ok := ctx.Deadline()
	return !ok || time.Until(d) > e.TimeForTask()
}

// processClaim is one claim of ProcessIDs: the outcome of every id, and the tasks the claim left
// out (deferred in out).
func (e *Engine) processClaim(ctx context.Context, ids []int64) (map[int64]exactlyonce.Outcome, []int64, error) {
	out := make(map[int64]exactlyonce.Outcome, len(ids))
	if len(ids) == 0 {
		return out, nil, nil
	}
	c := e.claim()
	claimed, err := e.claimDrafting(c, func(cl exactlyonce.Claim) (exactlyonce.Claimed, error) {
		return e.Store.ClaimIDs(ctx, cl, ids, c.decide)
	})
	if err != nil {
		return nil, nil, err
	}
	e.reportSettled(c.ID, claimed.Settled)
	e.reportSettled(c.ID, claimed.GaveUp)
	for _, id := range claimed.Settled {
		out[id] = exactlyonce.OutcomeSettled
	}
	done := e.work(ctx, c, claimed)
	for _, id := range done.settled {
		out[id] = exactlyonce.OutcomeSettled
	}
	// Claimed but not settled: the work failed (the event waits its backoff) or ran out of time, or
	// the lease was taken over. Another attempt will settle it. Out of attempts, it is failed.
	for id := range claimed.Failed {
		out[id] = exactlyonce.OutcomeBusy
	}
	for _, id := range append(claimed.GaveUp, done.gaveUp...) {
		out[id] = exactlyonce.OutcomeFailed
	}
	// A task whose delivery failed this time, or that this engine could not start before its
	// deadline, is the database's to bring back (its backoff, or at once): deferred.
	for _, id := range done.deferred {
		out[id] = exactlyonce.OutcomeDeferred
	}
	// A task the claim left out (it held as many tasks as one claim may) is pending: the next claim
	// takes it (ProcessIDs).
	for _, id := range claimed.LeftOut {
		out[id] = exactlyonce.OutcomeDeferred
	}
	for _, ev := range claimed.Leased {
		if _, ok := out[ev.ID]; !ok {
			out[ev.ID] = exactlyonce.OutcomeBusy
		}
	}
	var rest []int64
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			rest = append(rest, id)
			out[id] = exactlyonce.OutcomeBusy // until Outcomes says otherwise
		}
	}
	if len(rest) > 0 {
		others, err := e.Store.Outcomes(ctx, rest)
		if err != nil {
			// The claim committed; only the classification of the others failed. They stay busy: their
			// messages come back and will find them settled or claimable.
			e.logger().Warn(e.By+": could not classify unclaimed events; treating them as busy", "events", len(rest), "err", err)
		}
		for id, o := range others {
			out[id] = o
		}
	}
	recordClaim(ctx, claimed.Count(), len(claimed.Settled)+len(done.settled), out)
	return out, claimed.LeftOut, nil
}

// recordClaim records one claim's metrics on the Recorder ctx carries: its size, the events it
// settled as processed, and the busy and missing outcomes among out (nil for a claim of due events,
// which skips what others hold and names no id).
func recordClaim(ctx context.Context, size, processed int, out map[int64]exactlyonce.Outcome) {
	rec := metrics.From(ctx)
	if rec == nil {
		return
	}
	// A claim of due events that found none is a poll, not a batch: an idle agent polls every
	// second, and its zeros would drown the sizes of its batches.
	if size > 0 || out != nil {
		rec.Observe(metrics.ClaimBatchSize, float64(size))
	}
	rec.Add(metrics.EventsProcessed, processed)
	busy, missing := 0, 0
	for _, o := range out {
		switch o {
		case exactlyonce.OutcomeBusy:
			busy++
		case exactlyonce.OutcomeMissing:
			missing++
		}
	}
	rec.Add(metrics.OutcomeBusy, busy)
	rec.Add(metrics.OutcomeMissing, missing)
}

// Batch says what one ProcessDue did.
type Batch struct {
	// Claimed is how many events the claim took; fewer than the limit means no more were due.
	Claimed int
	// Settled is how many of them were settled.
	Settled int
	// Retrying is how many of them failed and wait their backoff; GaveUp how many failed for good.
	Retrying, GaveUp int
	// Chained is how many tasks beyond the claimed ones were delivered and settled (counted in
	// Settled, GaveUp or Retrying too): each handed on to this claim by the settlement of the task
	// before it in its reference.
	Chained int
}

// ProcessDue claims up to limit due events (pending for longer than grace, or leased with an expired
// lease) that nobody else holds, and processes them.
func (e *Engine) ProcessDue(ctx context.Context, grace time.Duration, limit int) (Batch, error) {
	return e.ProcessDueIn(ctx, grace, limit, nil)
}

// ProcessDueIn is ProcessDue narrowed to the events whose routing hash lies in r (an agent's
// shard); nil is every hash.
//
// When ctx's deadline leaves less than TimeForTask, the claim takes no task: it could only lease
// the task and release it again, and the loop around it (an agent's, a sweep's) would claim it
// again at once, over and over until its deadline, with no delivery (a claim of named events,
// ProcessIDs, made once per queue message, still leases it and releases it: deferred). Such a
// claim, like every claim of an engine that delivers no task, leaves tasks out (Claim.SkipTasks)
// and takes the other due events; with only tasks due it claims nothing (Batch.Claimed 0), and the
// loop pauses as when nothing is due.
func (e *Engine) ProcessDueIn(ctx context.Context, grace time.Duration, limit int, r *exactlyonce.HashRange) (Batch, error) {
	c := e.claim()
	c.Range = r
	c.tasks = c.delivers && e.Tasks.timeFor(ctx)
	c.SkipTasks = !c.tasks
	claimed, err := e.claimDrafting(c, func(cl exactlyonce.Claim) (exactlyonce.Claimed, error) {
		return e.Store.ClaimDue(ctx, cl, grace, limit, c.decide)
	})
	if err != nil {
		return Batch{}, err
	}
	e.reportSettled(c.ID, claimed.Settled)
	e.reportSettled(c.ID, claimed.GaveUp)
	done := e.work(ctx, c, claimed)
	gaveUp := len(claimed.GaveUp) + len(done.gaveUp)
	recordClaim(ctx, claimed.Count(), len(claimed.Settled)+len(done.settled), nil)
	return Batch{Claimed: claimed.Count(), Settled: len(claimed.Settled) + len(done.settled),
		Retrying: len(claimed.Failed) - len(claimed.GaveUp) + done.failed - len(done.gaveUp), GaveUp: gaveUp,
		Chained: done.chained}, nil
}

// afterWorkTimeout bounds what follows the work of leased events (their settlement, the record of
// failed work, the release of work not done), which runs even when the engine's own context has
// ended: the work is done, and these transactions are short.
const afterWorkTimeout = 5 * time.Second

// worked is what work did with a claim's leased events.
type worked struct {
	settled  []int64 // settled
	gaveUp   []int64 // failed for good
	failed   int     // work failed (gaveUp included)
	deferred []int64 // tasks waiting their backoff, or released
	chained  int     // tasks delivered beyond the claimed ones (tasks.go)
}

// work does the work of the events leased to claim c, outside any transaction, and settles those
// whose work succeeded. Events whose work failed have the failure recorded (they wait their backoff,
// or are failed for good); events that the context's end left undone are released (pending,
// claimable at once, no attempt counted); if even that fails their lease expires.
func (e *Engine) work(ctx context.Context, c claimRun, claimed exactlyonce.Claimed) worked {
	log := e.logger()
	for id, err := range claimed.Failed {
		log.Warn(e.By+": work failed", "id", id, "err", err)
	}
	var out worked
	var tasks, others []exactlyonce.Event
	for _, ev := range claimed.Leased {
		if ev.Kind == exactlyonce.KindTask && c.delivers {
			tasks = append(tasks, ev)
		} else {
			others = append(others, ev)
		}
	}
	if len(tasks) > 0 {
		tw := e.workTasks(ctx, c.Claim, c.leasedAt, tasks)
		out.settled = append(out.settled, tw.completed...)
		out.gaveUp = append(out.gaveUp, tw.gaveUp...)
		out.failed = len(tw.gaveUp) + len(tw.retrying)
		out.deferred = append(append(out.deferred, tw.retrying...), tw.released...)
		out.chained = tw.chained
	}
	if len(others) == 0 {
		return out
	}
	results := make(map[int64]exactlyonce.Result, len(others))
	failures := map[int64]exactlyonce.Failure{}
	var release []int64
	for _, ev := range others {
		if ctx.Err() != nil {
			release = append(release, ev.ID)
			continue
		}
		w, ok := c.works[ev.Kind]
		if !ok {
			failures[ev.ID] = c.failure(ev, noWork(ev.Kind))
			continue
		}
		res, err := w.Do(ctx, ev)
		if err != nil {
			if ctx.Err() != nil {
				release = append(release, ev.ID) // cut short by the deadline: not the work's failure
				continue
			}
			log.Warn(e.By+": work failed", "id", ev.ID, "err", err)
			failures[ev.ID] = c.failure(ev, err)
			continue
		}
		results[ev.ID] = res
	}
	// Settle even if ctx has just ended: the work is done, and the settlement is short.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterWorkTimeout)
	defer cancel()
	if len(results) > 0 {
		settled, err := e.Store.Settle(sctx, c.ID, c.By, results)
		if err != nil {
			// The events stay leased until their lease expires; then they are claimed and worked again.
			log.Error(e.By+": settlement failed; the events are worked again after their lease", "events", len(results), "err", err)
		}
		e.reportSettled(c.ID, settled)
		out.settled = append(out.settled, settled...)
	}
	if len(failures) > 0 {
		out.failed += len(failures)
		gaveUp, err := e.Store.Fail(sctx, c.Claim, failures)
		if err != nil {
			log.Warn(e.By+": recording failed work failed; the events are claimable when their lease expires", "events", len(failures), "err", err)
		}
		e.reportSettled(c.ID, gaveUp)
		out.gaveUp = append(out.gaveUp, gaveUp...)
	}
	if len(release) > 0 {
		if err := e.Store.Release(sctx, c.ID, release); err != nil {
			log.Warn(e.By+": release failed; the events are claimable when their lease expires", "events", len(release), "err", err)
		}
	}
	return out
}
