// Package sweeping is the safety net: it finds pending events that the queue path did not process
// (a send that failed, a message that died in the DLQ, a crash) and events whose lease expired (a
// worker that died mid-work), and processes them in the one processing shape (internal/processing:
// claim with SELECT ... FOR UPDATE SKIP LOCKED, work, settle), so that any number of sweepers and
// processors can run at once without settling an event twice.
package sweeping

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/processing"
)

// DefaultBatchSize is Config.BatchSize's default.
const DefaultBatchSize = 500

// DefaultGrace is Config.Grace's default.
const DefaultGrace = 10 * time.Second

// Config configures a Sweeper. Zero values take the defaults shown.
type Config struct {
	// BatchSize is the number of events claimed and processed per transaction. Default 500
	// (measured: about 1.5x the drain rate of 100; docs/performance.md).
	BatchSize int
	// Grace leaves pending events younger than this to the queue path. Default 10 s. Zero would
	// race the processor for every fresh event (harmless, but wasted work), so 0 means the default;
	// use a negative value for "no grace".
	Grace time.Duration
	// StopBefore is how long before the context's deadline a sweep stops starting batches. Default 2 s.
	StopBefore time.Duration
	// IdleSleep and IdleJitter set the standalone loop's pause when nothing is due: IdleSleep plus a
	// random duration up to IdleJitter. Defaults 1 s and 0.5 s.
	IdleSleep, IdleJitter time.Duration
	Logger                *slog.Logger
	// Metrics says where Handle publishes each invocation's metrics (metrics.go). Default none.
	Metrics Metrics
	// Works gives each kind its work. Default exactlyonce.DefaultWorks().
	Works exactlyonce.Works
	// Lease is how long leased events are held. Default processing.DefaultLease.
	Lease time.Duration
	// Backoff says how often failed work is tried again, and after how long.
	Backoff exactlyonce.Backoff
	// Report, when set, hears of every settlement (the exactly-once checker's reports).
	Report processing.Reporter
	// Tasks, when set, makes the sweeper deliver tasks (processing.Engine.Tasks).
	Tasks *processing.Tasks
	// WorkerMaxReferences and WorkerRetention configure the EventService of each agent the sweeper
	// runs (WORKER_MAX_REFERENCES, WORKER_RETENTION; zero: processing's defaults).
	WorkerMaxReferences int
	WorkerRetention     time.Duration
	// FoldBatch is the most settled events one fold transaction moves into the count (fold.go).
	// Default eventstore.DefaultFoldBatch's value, 5000.
	FoldBatch int
	// KeepHistory leaves the folded history in the events table instead of packing it into pages
	// (fold.go, Packer). For tests that break the table's invariants by hand on purpose (the chaos
	// checker's); a deployed sweeper always packs.
	KeepHistory bool
	// PackBudget is how long, at most, one maintenance starts packing transactions for (fold.go):
	// the maintenance runs between an agent's batches, so a history being packed for the first
	// time is packed a little at a time instead of holding the claims up. Default 2 s.
	PackBudget time.Duration
	Counters   *Counters // the counter service's part of every sweep (counters.go); nil: none
	// Shards (SWEEPER_SHARDS, default 1) and Agent configure HandleAgent, the scheduled sweeper as
	// an agent (agent.go, with Stores.Agents): how many static shards the sweepers split the hash
	// space into, and the membership's intervals.
	Shards int
	Agent  agents.Config
	// AgentStopBefore is how long before its deadline HandleAgent stops starting batches and leaves.
	// Default DefaultAgentStopBefore.
	AgentStopBefore time.Duration
	// MaintainEvery is how often, at most, an agent's loop runs the sweeper's maintenance (Maintain:
	// the fold, pruning keys, the counter service's sweep) between its batches. Default 30 s (the
	// scheduled sweeper ran it once a minute before it became an agent).
	MaintainEvery time.Duration
}

// DefaultFoldBatch is Config.FoldBatch's default (eventstore.DefaultFoldBatch; not imported, so that
// this package does not depend on the store).
const DefaultFoldBatch = 5000

// Stores are what a sweeper reads and writes, each the interface of what it uses of it. Events is
// required (the sweep's claims and settlements), Tasks too when Config.Tasks delivers tasks, and
// Agents for HandleAgent. Each of the others is a step of the maintenance that a nil store leaves
// out: the fold (Folder), the pack (Packer), the pruning of idempotency keys (Keys), the counter
// service's sweep (Counters, with Config.Counters), the waiting events' gauges (Waiting), and the
// event workers of the tasks an agent delivers (Workers, with Config.Tasks).
type Stores struct {
	Events   processing.Store
	Tasks    processing.TaskStore
	Folder   Folder
	Packer   Packer
	Keys     KeyPruner
	Counters CounterStore
	Waiting  Waiting
	Workers  processing.WorkerStore
	Agents   agents.Store
}

// Sweeper processes due pending events.
type Sweeper struct {
	engine *processing.Engine
	stores Stores
	cfg    Config

	rec          *metrics.Recorder // Metrics.Recorder, or the sweeper's own for Metrics.Out
	folded       atomic.Int64      // events Maintain folded, for HandleAgent's result
	mu           sync.Mutex
	lastMaintain time.Time
}

// New returns a Sweeper on stores.
func New(stores Stores, cfg Config) *Sweeper {
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	} else if cfg.Grace < 0 {
		cfg.Grace = 0
	}
	cfg.StopBefore = cmp.Or(cfg.StopBefore, 2*time.Second)
	cfg.FoldBatch = cmp.Or(cfg.FoldBatch, DefaultFoldBatch)
	cfg.PackBudget = cmp.Or(cfg.PackBudget, 2*time.Second)
	cfg.MaintainEvery = cmp.Or(cfg.MaintainEvery, 30*time.Second)
	cfg.IdleSleep = cmp.Or(cfg.IdleSleep, time.Second)
	cfg.IdleJitter = cmp.Or(cfg.IdleJitter, 500*time.Millisecond)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rec := cfg.Metrics.Recorder
	if rec == nil && cfg.Metrics.Out != nil {
		rec = metrics.NewRecorder(metrics.PartSweeper, true, nil)
	}
	return &Sweeper{cfg: cfg, rec: rec, stores: stores, engine: &processing.Engine{Store: stores.Events, TaskStore: stores.Tasks,
		By: exactlyonce.BySweeper, Works: cfg.Works,
		Lease: cfg.Lease, Backoff: cfg.Backoff, Report: cfg.Report, Logger: cfg.Logger, Tasks: cfg.Tasks}}
}

// recorder returns the Recorder ctx carries, else the sweeper's.
func (s *Sweeper) recorder(ctx context.Context) *metrics.Recorder {
	return cmp.Or(metrics.From(ctx), s.rec)
}

// Result says what one sweep did.
type Result struct {
	Processed int   `json:"processed"` // events settled
	Retrying  int   `json:"retrying"`  // events whose work failed this time: they wait their backoff
	Failed    int   `json:"failed"`    // events whose work failed for the last time: settled as failed
	Batches   int   `json:"batches"`
	Folded    int64 `json:"folded"`             // settled events folded into the count (fold.go)
	Stopped   bool  `json:"stoppedForDeadline"` // true if it stopped for the deadline with work possibly left
	// PulseFailures counts the agent's failed pulses (HandleAgent): while they fail it claims nothing.
	PulseFailures int `json:"pulseFailures,omitempty"`
}

// Sweep processes due events in batches until a batch comes back short (nothing more is due) or the
// context's deadline is near, then folds what is settled into the count. Each batch settles on its
// own, so a sweep cut short loses nothing.
func (s *Sweeper) Sweep(ctx context.Context) (Result, error) {
	res, err := s.sweepDue(ctx)
	if err != nil {
		return res, err
	}
	res.Folded, err = s.Maintain(ctx)
	return res, err
}

// Maintain is what a sweeper does besides processing due events: it folds settled events into the
// count and packs the folded ones into pages (fold.go), prunes expired idempotency keys (idempotency.go) and runs the counter service's
// sweep (counters.go). Each is bounded and safe to run from many sweepers at once. It returns how
// many events it folded; only the fold's error is returned (the others log theirs).
func (s *Sweeper) Maintain(ctx context.Context) (int64, error) {
	folded, err := s.fold(ctx)
	if err == nil && !s.cfg.KeepHistory {
		if packed, perr := s.pack(ctx); perr != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("sweeper: packing the history failed; it is tried again later", "packed", packed, "err", perr)
		} else if packed > 0 {
			s.cfg.Logger.Info("sweeper: packed settled events into pages", "events", packed)
		}
	}
	s.pruneKeys(ctx)
	s.sweepCounters(ctx)
	s.folded.Add(folded)
	return folded, err
}

// maintainBetweenBatches is an agent's hook (agents.Config.Maintain): Maintain, at most every
// MaintainEvery, so that an agent that is never idle still folds, and an idle one does not run it
// on every poll.
func (s *Sweeper) maintainBetweenBatches(ctx context.Context) {
	s.mu.Lock()
	due := time.Since(s.lastMaintain) >= s.cfg.MaintainEvery
	if due {
		s.lastMaintain = time.Now()
	}
	s.mu.Unlock()
	if !due {
		return
	}
	if _, err := s.Maintain(ctx); err != nil && ctx.Err() == nil {
		s.cfg.Logger.Warn("sweeper: fold failed; it is tried again later", "err", err)
	}
	// A long-running agent (the local runner's, cmd/agent's) has no invocation to publish at the
	// end of: its gauges of the waiting events are read here, as often as the maintenance runs.
	if rec := metrics.From(ctx); rec != nil && ctx.Err() == nil {
		s.readWaiting(ctx, rec)
	}
}

// AgentMaintenance returns the hook that gives an agent the sweeper's maintenance between its
// batches (agents.Config.Maintain), for agents that run outside HandleAgent (the local runner's,
// cmd/agent's).
func (s *Sweeper) AgentMaintenance() func(context.Context) { return s.maintainBetweenBatches }

func (s *Sweeper) sweepDue(ctx context.Context) (Result, error) {
	var res Result
	for {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < s.cfg.StopBefore {
			res.Stopped = true
			return res, nil
		}
		b, err := s.engine.ProcessDue(ctx, s.cfg.Grace, s.cfg.BatchSize)
		if err != nil {
			return res, err
		}
		res.Batches++
		res.Processed += b.Settled
		res.Retrying += b.Retrying
		res.Failed += b.GaveUp
		if b.Claimed < s.cfg.BatchSize {
			return res, nil
		}
	}
}

// Handle is the Lambda handler for the scheduled EventBridge rule.
func (s *Sweeper) Handle(ctx context.Context, _ events.CloudWatchEvent) (Result, error) {
	ctx = metrics.With(ctx, s.recorder(ctx))
	start := time.Now()
	res, err := s.Sweep(ctx)
	s.publish(ctx, res, err)
	if err != nil {
		s.cfg.Logger.Error("sweeper: sweep failed", "processed", res.Processed, "err", err)
		return res, err
	}
	// An idle sweep is the common case (every minute in AWS, every few seconds locally): it is said
	// at debug level, so that the info log holds only sweeps that did something.
	level := slog.LevelDebug
	if res.Processed > 0 || res.Retrying > 0 || res.Failed > 0 || res.Stopped {
		level = slog.LevelInfo
	}
	s.cfg.Logger.Log(ctx, level, "sweeper: sweep done", "processed", res.Processed, "retrying", res.Retrying,
		"failed", res.Failed, "batches", res.Batches, "folded", res.Folded, "stoppedForDeadline", res.Stopped,
		"ms", time.Since(start).Milliseconds())
	return res, nil
}

// Run is the standalone worker loop: sweep, and when nothing was due sleep IdleSleep plus jitter (so
// that many workers do not poll in step). It returns when ctx is cancelled. Errors are logged and
// retried after the same pause: a database restart must not stop the worker.
func (s *Sweeper) Run(ctx context.Context) error {
	for {
		res, err := s.Sweep(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.cfg.Logger.Warn("sweeper: sweep failed; retrying", "err", err)
		} else if res.Processed > 0 {
			s.cfg.Logger.Info("sweeper: processed", "events", res.Processed, "batches", res.Batches)
			continue // there may be more
		}
		pause := s.cfg.IdleSleep + time.Duration(rand.Int64N(int64(s.cfg.IdleJitter)+1))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}
