// Package sweeping is the safety net: it finds pending events that the queue path did not process
// (a send that failed, a message that died in the DLQ, a crash) and events whose lease expired (a
// processor or agent that died mid-work), and processes them in the one processing shape (internal/processing:
// claim with SELECT ... FOR UPDATE SKIP LOCKED, work, settle), so that any number of sweepers and
// processors can run at once without settling an event twice.
package sweeping

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	// Grace leaves pending events younger than this to the queue path: nil (SWEEP_GRACE unset) the
	// default, DefaultGrace, 10 s; zero no grace, every pending event is due (the convention of
	// internal/config, passed through unchanged). No grace races the processor for every fresh
	// event (harmless, but wasted work).
	Grace *time.Duration
	// StopBefore is how long before the context's deadline a sweep stops starting batches. Default 2 s.
	StopBefore time.Duration
	Logger     *slog.Logger
	// Metrics says where HandleAgent publishes each invocation's metrics (metrics.go). Default none.
	Metrics Metrics
	// Engine is the engine options of the sweeper's agents, declared once in processing.Engine:
	// Works, Lease, Backoff, Report (the exactly-once checker's), Tasks (when set, the sweeper's
	// agents deliver tasks) and Logger (default: Logger). Its Store, TaskStore, By and Workers are
	// the sweeper's to set (New, Agent).
	Engine processing.Engine
	// WorkerMaxReferences and WorkerRetention configure the EventService of each agent that
	// delivers tasks (WORKER_MAX_REFERENCES, WORKER_RETENTION; zero: processing's defaults).
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
	// Retention is the archive's window (HISTORY_RETENTION, with Stores.Archiver): pages whose
	// newest event is older move to the bucket. Nil: DefaultRetention; zero: as soon as packed (the
	// convention of internal/config, passed through unchanged).
	Retention *time.Duration
	// ArchiveBudget is how long, at most, one maintenance moves pages to the archive for (it
	// always moves one page, if one is due). Default 2 s.
	ArchiveBudget time.Duration
	Counters      *Counters // the counter service's part of every sweep (counters.go); nil: none
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
// required (the sweep's claims and settlements), Tasks too when Config.Engine.Tasks delivers tasks,
// and Agents for its agents (Agent, HandleAgent). Each of the others is a step of the maintenance that a nil store leaves
// out: the fold (Folder), the pack (Packer), the pruning of idempotency keys (Keys), the counter
// service's sweep (Counters, with Config.Counters), the waiting events' gauges (Waiting), and the
// event workers of the tasks an agent delivers (Workers, with Config.Engine.Tasks).
type Stores struct {
	Events   processing.Store
	Tasks    processing.TaskStore
	Folder   Folder
	Packer   Packer
	Archiver Archiver
	Keys     KeyPruner
	Counters CounterStore
	Waiting  Waiting
	Workers  processing.WorkerStore
	Agents   agents.Store
	// Directory keeps the reference directory: the backfill of the tasks stored before it, and the
	// compaction of what creates logged (directory.go).
	Directory Directory
}

// Sweeper processes due pending events.
type Sweeper struct {
	engine *processing.Engine
	stores Stores
	cfg    Config
	grace  time.Duration // Config.Grace, its default applied
	// retention is Config.Retention, its default applied.
	retention time.Duration

	rec          *metrics.Recorder // Metrics.Recorder, or the sweeper's own for Metrics.Out
	folded       atomic.Int64      // events Maintain folded, for HandleAgent's result
	backfilled   atomic.Bool       // the reference directory is complete: no backfill (directory.go)
	mu           sync.Mutex
	lastMaintain time.Time
}

// New returns a Sweeper on stores.
func New(stores Stores, cfg Config) *Sweeper {
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	grace := DefaultGrace
	if cfg.Grace != nil {
		grace = *cfg.Grace
	}
	cfg.StopBefore = cmp.Or(cfg.StopBefore, 2*time.Second)
	cfg.FoldBatch = cmp.Or(cfg.FoldBatch, DefaultFoldBatch)
	cfg.PackBudget = cmp.Or(cfg.PackBudget, 2*time.Second)
	cfg.ArchiveBudget = cmp.Or(cfg.ArchiveBudget, 2*time.Second)
	retention := DefaultRetention
	if cfg.Retention != nil {
		retention = *cfg.Retention
	}
	cfg.MaintainEvery = cmp.Or(cfg.MaintainEvery, 30*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rec := cfg.Metrics.Recorder
	if rec == nil && cfg.Metrics.Out != nil {
		rec = metrics.NewRecorder(metrics.PartSweeper, true, nil)
	}
	engine := cfg.Engine
	engine.Store, engine.TaskStore, engine.By, engine.Workers = stores.Events, stores.Tasks, exactlyonce.BySweeper, nil
	engine.Logger = cmp.Or(engine.Logger, cfg.Logger)
	return &Sweeper{cfg: cfg, grace: grace, retention: retention, rec: rec, stores: stores, engine: &engine}
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
// count and packs the folded ones into pages (fold.go), backfills the reference directory until it
// is complete and compacts what creates logged into it (directory.go), prunes expired idempotency keys (idempotency.go) and runs the counter service's
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
		s.archive(ctx)
	}
	s.backfill(ctx)
	s.compactDirectory(ctx)
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

// Agent returns an agent that processes due events under path by (exactlyonce.BySweeper for the
// sweepers, ByAgent for the standalone agent) with the sweeper's engine and grace, does the
// sweeper's maintenance between its batches, and, when it delivers tasks, packs them into event
// workers of its own (an EventService of WorkerMaxReferences and WorkerRetention), adopted by the others if it
// dies. It is the one assembly of every agent that processes due events: the scheduled sweeper's
// (HandleAgent), the local runner's, the standalone agent's, the chaos run's and the benchmark's
// (through internal/wire). ac's Grace and Maintain are the sweeper's; its logger defaults to the
// sweeper's.
func (s *Sweeper) Agent(ac agents.Config, by string) (*agents.Agent, error) {
	ac.Grace = s.grace
	ac.Maintain = s.maintainBetweenBatches
	ac.Member.Logger = cmp.Or(ac.Member.Logger, s.cfg.Logger)
	engine := *s.engine
	engine.By = by
	if s.stores.Workers != nil && engine.Tasks != nil {
		engine.Workers = &processing.EventService{Store: s.stores.Workers, MaxReferences: s.cfg.WorkerMaxReferences,
			Retention: s.cfg.WorkerRetention, Logger: s.cfg.Logger}
	}
	if s.stores.Agents == nil {
		return nil, fmt.Errorf("sweeper: no agent store configured")
	}
	return agents.New(s.stores.Agents, &engine, ac)
}

func (s *Sweeper) sweepDue(ctx context.Context) (Result, error) {
	var res Result
	for {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < s.cfg.StopBefore {
			res.Stopped = true
			return res, nil
		}
		b, err := s.engine.ProcessDue(ctx, s.grace, s.cfg.BatchSize)
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
