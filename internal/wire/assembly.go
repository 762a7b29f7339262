package wire

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
)

// This file assembles each process once: the API (API), the processor (Processor), every agent that
// processes due events (Agent: the scheduled sweeper's, through sweeping.Sweeper.Agent, the local
// runner's, the standalone agent's, the chaos run's; StandaloneAgents), and the counter consumer
// (CounterConsumer). The functions, the commands, the local runner, the chaos run and the benchmark
// build their processes here; what differs between them (a Lambda answers inline, a local run
// lingers; a chaos agent pulses fast) is what they pass.

// API returns the API's server on stores, sending a message per async event to q (nil: async events
// are left to the sweeper), with the configured idempotency keys (IDEMPOTENCY_*) and the deliveries'
// address rule (WEBHOOK_ALLOW_*). group says how async creates are stored and queued: a Lambda's
// answers inline (api.AsyncGroup.Inline), a long-running process's lingers (AsyncLinger).
func API(c config.Config, stores *Stores, q queue.Sender, group api.AsyncGroup, log *slog.Logger) *api.Server {
	return &api.Server{Stores: stores.API(), Queue: q, Logger: log, AsyncGroup: group, Webhook: WebhookPolicy(c),
		Idempotency: api.Idempotency{TTL: c.Idempotency.TTL, Wait: c.Idempotency.Wait, Required: c.Idempotency.Required}}
}

// DefaultAsyncLinger is ASYNC_LINGER's default, for a long-running process's API (AsyncLinger).
// At 16 clients it let a message name about 50 events where answering after the send gave about 8,
// and it made the async path as cheap in CPU per event as POST /events (docs/performance.md).
const DefaultAsyncLinger = 5 * time.Millisecond

// AsyncLinger is the linger of a long-running process's API: linger (ASYNC_LINGER, as config reads
// it: nil unset) with its default applied, DefaultAsyncLinger.
func AsyncLinger(linger *time.Duration) time.Duration {
	if linger == nil {
		return DefaultAsyncLinger
	}
	return *linger
}

// EventWorkers configures a processor's event workers (processing.EventService): its registration
// as an agent without a range (Member), and the service's MaxReferences and Retention.
type EventWorkers struct {
	Member        agents.MemberConfig
	MaxReferences int
	Retention     time.Duration
}

// ProcessorEventWorkers returns the event workers of a processor as the configuration sets them:
// an agent without a range of kind "processor" (AGENT_NAME, AGENT_PULSE_INTERVAL and
// AGENT_EXPIRATION apply), named after the Lambda container's log stream when there is one, else
// processor-<pid>-<host>; WORKER_MAX_REFERENCES, WORKER_RETENTION.
func ProcessorEventWorkers(c config.Config, log *slog.Logger) *EventWorkers {
	mc := AgentVars(c.Agent).Member
	mc.Static = nil
	mc.Kind, mc.Logger = "processor", log
	if mc.Name == "" {
		mc.Name = os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME")
	}
	if mc.Name == "" {
		host, _ := os.Hostname()
		mc.Name = fmt.Sprintf("processor-%d-%s", os.Getpid(), host)
	}
	return &EventWorkers{Member: mc, MaxReferences: c.Webhook.WorkerMaxReferences, Retention: c.Webhook.WorkerRetention}
}

// Processor returns a processor on stores with the engine options e (processing.Engine: works,
// lease, backoff, report, logger, task deliveries; its stores, By and Workers are set here and by
// the processor), the visibility extension vis (nil: none), and, when it delivers tasks and workers
// is set, event workers of its own under an agent without a range: the tasks it delivers join
// event workers as the agents' do, adopted by the agents once it stops pulsing. Nil workers: tasks
// are delivered without the event workers' registry (the chaos run's processors).
func Processor(stores *Stores, e processing.Engine, vis *sqsbatch.Visibility, workers *EventWorkers) (*processing.Processor, error) {
	e.Store, e.TaskStore = stores.Events, stores.Tasks
	p := &processing.Processor{Engine: e, Visibility: vis}
	if e.Tasks == nil || workers == nil {
		return p, nil
	}
	mc := workers.Member
	mc.Kind = "processor"
	mc.Logger = cmp.Or(mc.Logger, e.Logger)
	es := &processing.EventService{Store: stores.Agents, MaxReferences: workers.MaxReferences, Retention: workers.Retention,
		Logger: cmp.Or(e.Logger, mc.Logger)}
	return p, agents.WithEventWorkers(p, stores.Agents, es, mc)
}

// Sweeping returns the configured sweeping.Config, logging to log (nil: sweeping's default):
// SWEEP_BATCH_SIZE, SWEEP_GRACE (passed as config reads it: nil unset, zero no grace),
// SWEEPER_SHARDS, AGENT_* and SHARDS_* for the scheduled sweeper's agent, WORKER_* for its event
// workers, HISTORY_RETENTION (passed as config reads it) for the archive. Its engine's Tasks and its Counters are delivery.SweeperConfig's.
func Sweeping(c config.Config, log *slog.Logger) sweeping.Config {
	return sweeping.Config{BatchSize: c.Sweep.BatchSize, Grace: c.Sweep.Grace, Logger: log, Shards: c.Sweep.Shards,
		Agent: AgentVars(c.Agent), WorkerMaxReferences: c.Webhook.WorkerMaxReferences, WorkerRetention: c.Webhook.WorkerRetention,
		Retention: c.History.Retention}
}

// Agent returns an agent that processes due events on stores under path by (exactlyonce.BySweeper
// for a sweeper, ByAgent for the standalone agent), configured by ac (membership, batch, polling),
// with the engine options, grace, event workers and maintenance of sc (sweeping.Sweeper.Agent, the
// one assembly of such an agent, which the scheduled sweeper's invocations use too).
func Agent(stores *Stores, sc sweeping.Config, ac agents.Config, by string) (*agents.Agent, error) {
	return sweeping.New(stores.Sweeping(), sc).Agent(ac, by)
}

// AgentConfigs returns the agents a process runs: one per shard SHARDS_ASSIGNED lists, as a
// Hibernate Search node runs one event processor per assigned shard, each its own member of the
// agents table (named with its shard when there are several); or the one dynamic agent. Each is
// configured by AGENT_* and SHARDS_* (AgentVars), of kind kind, logging to log, named after kind,
// process id and host when AGENT_NAME is unset. Their grace is the sweeper's (SWEEP_GRACE), which
// Agent gives them.
func AgentConfigs(c config.Config, kind string, log *slog.Logger) []agents.Config {
	base := AgentVars(c.Agent)
	if base.Member.Name == "" {
		host, _ := os.Hostname()
		base.Member.Name = fmt.Sprintf("%s-%d-%s", kind, os.Getpid(), host)
	}
	base.Member.Kind, base.Member.Logger = kind, log
	assigned := c.Agent.ShardsAssigned
	if len(assigned) <= 1 {
		return []agents.Config{base}
	}
	out := make([]agents.Config, len(assigned))
	for i, shard := range assigned {
		ac := base
		ac.Member.Static = &agents.Shard{Total: *c.Agent.ShardsTotal, Index: shard}
		ac.Member.Name = fmt.Sprintf("%s-shard%d", base.Member.Name, shard)
		out[i] = ac
	}
	return out
}

// AgentVars returns the agents.Config that AGENT_* and SHARDS_* set, and nothing else: zero where
// they are unset, for agents' defaults. With several shards in SHARDS_ASSIGNED, the first one's.
func AgentVars(a config.Agent) agents.Config {
	ac := agents.Config{
		Member:       agents.MemberConfig{Name: a.Name, PulseInterval: a.PulseInterval, Expiration: a.Expiration},
		BatchSize:    a.BatchSize,
		PollInterval: a.PollInterval,
		PollJitter:   a.PollInterval / 2,
	}
	if a.ShardsTotal != nil && len(a.ShardsAssigned) > 0 {
		ac.Member.Static = &agents.Shard{Total: *a.ShardsTotal, Index: a.ShardsAssigned[0]}
	}
	return ac
}

// CounterConsumer returns the counter service's consumer on stores, publishing with p (nil: the
// notifications wait for a sweeper that has a publisher), extending its messages' visibility with
// vis (nil: none).
func CounterConsumer(stores *Stores, p counters.Publisher, vis *sqsbatch.Visibility, log *slog.Logger) *counters.Consumer {
	return &counters.Consumer{Store: stores.Counters, Publisher: p, Visibility: vis, Logger: log}
}
