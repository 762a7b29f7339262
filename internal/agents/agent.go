package agents

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/processing"
)

// Defaults of the processing loop, as Hibernate Search's outbox-polling has them.
const (
	DefaultBatchSize    = 50
	DefaultPollInterval = time.Second
	DefaultPollJitter   = 500 * time.Millisecond
	// DefaultBatchTimeout bounds one batch, which runs to its end even after the agent is told to
	// stop (SIGTERM): it finishes its batch, then leaves.
	DefaultBatchTimeout = 30 * time.Second
)

// Config configures an Agent. Zero values take the defaults shown.
type Config struct {
	Member MemberConfig
	// BatchSize is the most events one claim takes. Default 50.
	BatchSize int
	// Grace leaves pending events younger than this to the queue path (as the sweeper's grace).
	// Zero: no grace, every pending event is due.
	Grace time.Duration
	// PollInterval and PollJitter are the pause when nothing is due, or when the agent may not
	// claim (WAITING, SUSPENDED, its pulse failing): PollInterval plus up to PollJitter. Defaults
	// 1 s and 0.5 s. A member that is not RUNNING also pulses every PollInterval rather than every
	// pulse interval, so that a topology change settles in a few seconds.
	PollInterval, PollJitter time.Duration
	// BatchTimeout bounds one batch. Default 30 s, and at least twice the time the engine needs for
	// a task (processing.Engine.TimeForTask: WEBHOOK_TIMEOUT and a margin), so that a batch can
	// deliver one: a batch shorter than that claims no task.
	BatchTimeout time.Duration
	// Maintain, when set, is called after every batch and every pause, with the loop's context:
	// work that is not a claim (a sweeper's fold of the count, its pruning), which it rate-limits
	// itself (sweeping.Sweeper.Agent sets it). Nil: none.
	Maintain func(context.Context)
}

// Agent is a standalone agent's loop: if it may claim, process a batch of due events of its range;
// otherwise, or when nothing was due, wait the polling interval. It pulses beside the loop.
type Agent struct {
	Member *Member
	Engine *processing.Engine
	// Totals counts what the agent's batches did. Safe for concurrent use.
	Totals Totals
	cfg    Config
	log    *slog.Logger
}

// Totals counts what an agent's batches did.
type Totals struct {
	Batches  atomic.Int64
	Settled  atomic.Int64 // events settled
	Retrying atomic.Int64 // events whose work failed and wait their backoff
	GaveUp   atomic.Int64 // events whose work failed for the last time
	Errors   atomic.Int64 // batches that failed (their claim's transaction)
}

// New returns an agent that processes with engine.
func New(store Store, engine *processing.Engine, cfg Config) (*Agent, error) {
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.PollJitter = cmp.Or(cfg.PollJitter, DefaultPollJitter)
	cfg.BatchTimeout = max(cmp.Or(cfg.BatchTimeout, DefaultBatchTimeout), 2*engine.TimeForTask())
	m, err := NewMember(store, cfg.Member)
	if err != nil {
		return nil, err
	}
	if engine.Workers != nil && engine.Workers.AgentID == nil {
		engine.Workers.AgentID = m.ID
	}
	return &Agent{Member: m, Engine: engine, cfg: cfg, log: m.cfg.Logger}, nil
}

// Run runs the loop until ctx ends, then leaves (deletes its row) and returns. A batch under way
// when ctx ends runs to its end first (SIGTERM: it finishes its batch). Errors are logged and the
// loop goes on: a database restart must not stop an agent.
func (a *Agent) Run(ctx context.Context) error {
	return a.RunUntil(context.WithoutCancel(ctx), ctx)
}

// RunUntil runs the loop until stop ends, then leaves and returns. hard bounds everything,
// including the batch under way when stop ends and the leaving: a Lambda's invocation, whose
// deadline nothing may outlive, with stop ending a few seconds before it.
//
// The pulse runs on its own goroutine, beside the batches, where Hibernate Search's loop takes
// turns: a batch that waits (on a row lock a stalled process holds, on slow work) must not stop
// the pulse, or a live agent would be ejected and its range reshuffled for nothing. Whether the
// agent may claim is checked before every batch (Member.Assignment).
func (a *Agent) RunUntil(hard, stop context.Context) error {
	ctx := stop
	pulsing := make(chan struct{})
	go func() {
		defer close(pulsing)
		a.pulseLoop(ctx)
	}()
	defer func() {
		<-pulsing
		lctx, cancel := context.WithTimeout(hard, 5*time.Second)
		defer cancel()
		// Its event workers first: marked willTerminate while its row still names it, so that the
		// agents that adopt them once it is gone find them full.
		if w := a.Engine.Workers; w != nil {
			if err := w.Stop(lctx); err != nil {
				a.log.Warn("agent: could not stop its event workers; they are adopted as they are", "err", err)
			}
		}
		if err := a.Member.Leave(lctx); err != nil {
			a.log.Warn("agent: could not leave; the others take its range after its expiration", "err", err)
		}
	}()
	for ctx.Err() == nil {
		r, ok := a.Member.Assignment()
		if !ok {
			a.pause(ctx, false)
			a.maintain(ctx)
			continue
		}
		b, err := a.batch(hard, ctx, r)
		a.Totals.Batches.Add(1)
		a.Totals.Settled.Add(int64(b.Settled))
		a.Totals.Retrying.Add(int64(b.Retrying))
		a.Totals.GaveUp.Add(int64(b.GaveUp))
		if err != nil {
			a.Totals.Errors.Add(1)
			a.log.Warn("agent: batch failed; retrying", "agent", a.Member.ID(), "err", err)
			a.pause(ctx, true)
			a.maintain(ctx)
			continue
		}
		if b.Settled > 0 || b.Retrying > 0 || b.GaveUp > 0 {
			a.log.Debug("agent: processed", "agent", a.Member.ID(), "settled", b.Settled, "range", r.String())
		}
		// Only an empty batch means nothing is due: a short one may be short because another agent's
		// scan held some of our rows for an instant (SKIP LOCKED passed them), and pausing then would
		// idle an agent with a backlog for a poll interval (the bench's drains with several agents
		// lost up to half their rate to it).
		if b.Claimed == 0 {
			a.pause(ctx, true)
		}
		a.maintain(ctx)
	}
	return nil
}

func (a *Agent) maintain(ctx context.Context) {
	if a.cfg.Maintain != nil && ctx.Err() == nil {
		a.cfg.Maintain(ctx)
	}
}

// pulseLoop pulses every pulse interval (every poll interval while the agent is not RUNNING, so
// that a topology change settles in a few seconds) until ctx ends. A failed pulse is a warning
// and a count in Member.Stats; the agent claims nothing once its lease runs short.
func (a *Agent) pulseLoop(ctx context.Context) {
	for ctx.Err() == nil {
		if err := a.Member.Pulse(ctx); err != nil && ctx.Err() == nil {
			// A warning: the next pulse tries again. One that keeps failing leaves the agent claiming
			// nothing, which its outcome says (a sweeper invocation with no successful pulse fails).
			a.log.Warn("agent: pulse failed; it claims nothing while its membership is in doubt", "agent", a.Member.ID(), "err", err)
		} else if r, ok := a.Member.Assignment(); ok && a.Engine.Workers != nil {
			// Recovery: the live event workers of agents that are gone, in this agent's range.
			if _, err := a.Engine.Workers.Recover(ctx, r); err != nil && ctx.Err() == nil {
				a.log.Warn("agent: event worker recovery failed; it is tried again at the next pulse", "err", err)
			}
		}
		every := a.Member.cfg.PulseInterval
		if a.Member.State() != exactlyonce.AgentRunning {
			every = min(every, a.cfg.PollInterval)
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// batch processes one batch of range r, to its end even if ctx (stop) ends meanwhile, within hard.
func (a *Agent) batch(hard, ctx context.Context, r exactlyonce.HashRange) (processing.Batch, error) {
	bctx, cancel := context.WithTimeout(hard, a.cfg.BatchTimeout)
	defer cancel()
	// Told to stop, the batch finishes the deliveries under way and starts none: the tasks their
	// settlements hand on are left pending for the agents that stay.
	bctx = processing.Stopping(bctx, ctx)
	var hr *exactlyonce.HashRange
	if r != exactlyonce.AllHashes {
		hr = &r
	}
	if w := a.Engine.Workers; w != nil {
		// The open tasks of the event workers recovery adopted, at once (not after the grace).
		if ids := w.TakeRefill(); len(ids) > 0 {
			if _, err := a.Engine.ProcessIDs(bctx, ids); err != nil {
				a.log.Warn("agent: delivering adopted tasks failed; they are claimed when due", "err", err)
			}
		}
	}
	b, err := a.Engine.ProcessDueIn(bctx, a.cfg.Grace, a.cfg.BatchSize, hr)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return b, nil
	}
	return b, err
}

// pause waits the polling interval (plus jitter when idle), or until ctx ends.
func (a *Agent) pause(ctx context.Context, jitter bool) {
	d := a.cfg.PollInterval
	if jitter {
		d += time.Duration(rand.Int64N(int64(a.cfg.PollJitter) + 1))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// LogStatsEvery logs the agent's counters every d until ctx ends: pulses and failed pulses,
// registrations and ejections, batches and what they settled. It is the standalone agent's metric
// line (the sweeper Lambda publishes its own as EMF); a failing pulse shows there as well as in its
// error line.
func (a *Agent) LogStatsEvery(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			st := &a.Member.Stats
			a.log.Info("agent: stats", "agent", a.Member.ID(), "state", a.Member.State(),
				"pulses", st.Pulses.Load(), "pulseFailures", st.PulseFailures.Load(),
				"registrations", st.Registrations.Load(), "ejected", st.Ejected.Load(), "ejectedOthers", st.EjectedOthers.Load(),
				"batches", a.Totals.Batches.Load(), "settled", a.Totals.Settled.Load(), "batchErrors", a.Totals.Errors.Load())
		}
	}
}
