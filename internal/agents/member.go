// Package agents is the coordination of the processes that search the events table for due events
// (sweepers, standalone agents): each registers in the agents table, keeps itself alive with a
// pulse, ejects agents that stopped pulsing, waits until every member agrees on the topology, and
// then claims only the events whose routing hash falls in its own range. It follows the design of
// Hibernate Search's outbox-polling (AbstractAgentClusterLink, ShardAssignment), with expirations
// on the database's clock and an agent that stops claiming as soon as it is not sure to be a member.
//
// Sharding exists to avoid contention, not for correctness: the claim's SKIP LOCKED and the
// settle's guard keep every event settled exactly once even when two agents believe they own one
// range (a stale view).
package agents

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// Defaults, as Hibernate Search's outbox-polling has them.
const (
	DefaultPulseInterval = 2 * time.Second
	DefaultExpiration    = 30 * time.Second
	// MinExpiration is the shortest expiration Validate accepts. The others eject an agent whose
	// expiration has passed when they look, so an expiration of a few milliseconds (a typo of ms for
	// s) is passed whenever they look: each of their pulses ejected it, it registered again, and
	// every change of the membership put every dynamic agent WAITING, so that none claimed while it
	// ran (seen 2026-11-28 with 3 ms beside 4 agents; 300 ms ejected a live agent once in 30 s at a
	// load of 10). A second leaves a pulse, and a stall of a few hundred milliseconds, inside it.
	MinExpiration = time.Second
)

// Store is what an agent needs of the agents table (internal/mysql/agentstore implements it).
type Store interface {
	// RegisterAgent inserts a new agent, WAITING, expiring after expiration (the database's clock).
	RegisterAgent(ctx context.Context, spec exactlyonce.AgentSpec, expiration time.Duration) (exactlyonce.Agent, error)
	// PulseAgent pushes id's expiration forward; false: it has no row (it was ejected).
	PulseAgent(ctx context.Context, id int64, expiration time.Duration) (bool, error)
	// EjectExpiredAgents deletes the other agents whose expiration has passed and returns them.
	EjectExpiredAgents(ctx context.Context, self int64) ([]exactlyonce.Agent, error)
	// Agents lists every agent ordered by id, without locks.
	Agents(ctx context.Context) ([]exactlyonce.Agent, error)
	// AssignAgent persists id's state and assignment; false: it has no row.
	AssignAgent(ctx context.Context, id int64, state exactlyonce.AgentState, total, index *int) (bool, error)
	// RemoveAgent deletes id's row.
	RemoveAgent(ctx context.Context, id int64) error
}

// Shard is a static assignment: shard Index of Total (SHARDS_ASSIGNED, SHARDS_TOTAL).
type Shard struct {
	Total, Index int
}

// MemberConfig configures a Member. Zero values take the defaults shown.
type MemberConfig struct {
	// Name and Kind describe the agent in the table and GET /agents ("host-pid", "standalone").
	Name, Kind string
	// PulseInterval is how often a running agent pulses. Default 2 s.
	PulseInterval time.Duration
	// Expiration is how long after its last pulse an agent is ejected by the others. Default 30 s;
	// at least 3 PulseIntervals and MinExpiration (Validate).
	Expiration time.Duration
	// Static, when set, is the agent's static shard; nil: dynamic sharding (the shard count is the
	// number of live agents, the index the agent's position among them ordered by id).
	Static *Shard
	// Handover, for a static agent, makes a shard held by an older agent a hand-over to wait for
	// (WAITING, until the older leaves or expires) instead of a conflict (SUSPENDED): the scheduled
	// sweepers, where each tick's invocation takes its shard over from the previous tick's.
	Handover bool
	Logger   *slog.Logger
}

func (c MemberConfig) withDefaults() MemberConfig {
	c.PulseInterval = cmp.Or(c.PulseInterval, DefaultPulseInterval)
	c.Expiration = cmp.Or(c.Expiration, DefaultExpiration)
	c.Kind = cmp.Or(c.Kind, "agent")
	c.Name = cmp.Or(c.Name, c.Kind)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate says what is wrong with the configuration, if anything.
func (c MemberConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.PulseInterval <= 0 || c.Expiration < 3*c.PulseInterval {
		errs = append(errs, fmt.Errorf("the agent expiration (%s) must be at least 3 pulse intervals (%s): "+
			"a live agent must be able to miss a pulse without being ejected", c.Expiration, c.PulseInterval))
	}
	if c.Expiration < MinExpiration {
		errs = append(errs, fmt.Errorf("the agent expiration (%s) must be at least %s: a shorter one has passed "+
			"whenever the other agents look, and they eject the agent at every pulse", c.Expiration, MinExpiration))
	}
	if s := c.Static; s != nil {
		if _, err := exactlyonce.ShardRange(s.Index, s.Total); err != nil {
			errs = append(errs, fmt.Errorf("static sharding: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Stats counts what a member did. Safe for concurrent use.
type Stats struct {
	Pulses        atomic.Int64 // pulses that succeeded
	PulseFailures atomic.Int64 // pulses that failed (the agent processes nothing until one succeeds)
	Registrations atomic.Int64 // times it registered (more than 1: it was ejected and came back)
	Ejected       atomic.Int64 // times it found itself ejected
	EjectedOthers atomic.Int64 // expired agents it ejected
}

// Member is one agent's membership: its row, its pulse and its assignment. Pulse is called from one
// goroutine; Assignment and State from any.
type Member struct {
	store Store
	cfg   MemberConfig
	log   *slog.Logger
	Stats Stats

	mu         sync.Mutex
	registered bool
	self       exactlyonce.Agent
	pulsedAt   time.Time // when the last successful pulse (or registration) was sent: this process's clock
	why        string    // why it is not running, for the log
	// seen is the sharding of every agent its last pulse read, so that the next can tell an idle
	// processor's expired row (no range, expected) from a lost agent's when it ejects them.
	seen map[int64]exactlyonce.Sharding
}

// NewMember returns an unregistered member; its first Pulse registers it.
func NewMember(store Store, cfg MemberConfig) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Member{store: store, cfg: cfg, log: cfg.Logger}, nil
}

// Config returns the member's configuration, with its defaults.
func (m *Member) Config() MemberConfig { return m.cfg }

// ID returns the agent's id, 0 while unregistered.
func (m *Member) ID() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.registered {
		return 0
	}
	return m.self.ID
}

// State returns the state the agent last persisted ("" while unregistered).
func (m *Member) State() exactlyonce.AgentState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.registered {
		return ""
	}
	return m.self.State
}

// Assignment returns the hash range the agent may claim, and false when it may claim nothing: it is
// not registered, not RUNNING, or its last successful pulse is so old that the others may have
// ejected it (its lease, counted on this process's clock from before the pulse was sent, has less
// than a pulse interval left). The check runs before every claim, so an agent that was stopped
// (SIGSTOP) past its expiration claims nothing when it continues, until it has pulsed again.
func (m *Member) Assignment() (exactlyonce.HashRange, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.registered || m.self.State != exactlyonce.AgentRunning || !m.fresh() {
		return exactlyonce.HashRange{}, false
	}
	r, err := exactlyonce.ShardRange(*m.self.AssignedShardIndex, *m.self.TotalShardCount)
	return r, err == nil
}

// fresh tells whether the agent's lease, as this process counts it, has at least a pulse interval
// left. Called with mu held.
func (m *Member) fresh() bool {
	return time.Since(m.pulsedAt) < m.cfg.Expiration-m.cfg.PulseInterval
}

// Pulse is one pulse, in this order (Hibernate Search's outbox-polling pulse), each step its own
// transaction: (1) register, or
// push its own expiration forward; (2) eject the other agents that expired; (3) read every agent;
// (4) persist WAITING with the target assignment if it changed, or RUNNING once every member agrees
// on the topology. An error leaves the agent unable to claim once its lease runs short
// (Assignment); the caller logs it and pulses again. The Recorder ctx carries counts the pulse
// (AgentPulses, or PulseFailures unless ctx itself ended) and a change of the assigned range
// (ShardChanges).
func (m *Member) Pulse(ctx context.Context) error {
	err := m.pulse(ctx)
	if err != nil && ctx.Err() != nil {
		// Cut short by its own context (the agent stopping, an invocation's deadline), not failed:
		// PulseFailures counts what went wrong, and a Lambda's agent stops with whatever is in flight.
		return err
	}
	if err != nil {
		m.Stats.PulseFailures.Add(1)
		metrics.From(ctx).Add(metrics.PulseFailures, 1)
		return err
	}
	m.Stats.Pulses.Add(1)
	metrics.From(ctx).Add(metrics.AgentPulses, 1)
	return nil
}

func (m *Member) pulse(ctx context.Context) error {
	sent := time.Now()
	m.mu.Lock()
	registered, id := m.registered, m.self.ID
	m.mu.Unlock()
	if registered {
		ok, err := m.store.PulseAgent(ctx, id, m.cfg.Expiration)
		if err != nil {
			return fmt.Errorf("pulse: %w", err)
		}
		if !ok {
			m.ejected("its row is gone: the others ejected it, as it had not pulsed within its expiration (" + m.cfg.Expiration.String() + ")")
			registered = false
		}
	}
	if !registered {
		spec := exactlyonce.AgentSpec{Name: m.cfg.Name, Kind: m.cfg.Kind, Sharding: exactlyonce.ShardingDynamic}
		if s := m.cfg.Static; s != nil {
			spec.Sharding, spec.Total, spec.Index = exactlyonce.ShardingStatic, new(s.Total), new(s.Index)
		}
		a, err := m.store.RegisterAgent(ctx, spec, m.cfg.Expiration)
		if err != nil {
			return fmt.Errorf("register: %w", err)
		}
		m.Stats.Registrations.Add(1)
		m.log.Info("agent: registered", "agent", a.ID, "name", a.Name, "sharding", a.Sharding)
		m.mu.Lock()
		m.registered, m.self = true, a
		m.mu.Unlock()
		id = a.ID
	}
	m.mu.Lock()
	m.pulsedAt = sent
	m.mu.Unlock()

	gone, err := m.store.EjectExpiredAgents(ctx, id)
	switch {
	case err != nil && ctx.Err() != nil:
		// The agent is stopping (its context ended mid-pulse): nothing is wrong, and an idle
		// system's shutdown stays quiet.
		m.log.Debug("agent: stopped before ejecting expired agents", "agent", id, "err", err)
	case err != nil:
		// Not fatal: another agent's pulse ejects them, or ours next time.
		m.log.Warn("agent: could not eject expired agents", "agent", id, "err", err)
	}
	for _, a := range gone {
		m.Stats.EjectedOthers.Add(1)
		m.mu.Lock()
		sharding, seen := m.seen[a.ID]
		m.mu.Unlock()
		if seen && sharding == exactlyonce.ShardingNone {
			// A processor's agent pulses only while a batch holds it (Rangeless): idle past its
			// expiration, its row expires, as a Lambda's does between invocations. Nothing is wrong.
			m.log.Info("agent: ejected the expired agent of an idle processor; its event workers are adopted",
				"agent", id, "ejected", a.ID, "name", a.Name)
			continue
		}
		// An agent with a range pulses as long as it runs: it stopped without leaving (killed, or
		// stalled past its expiration).
		m.log.Warn("agent: ejected an expired agent; its range is shared out again and its event workers adopted",
			"agent", id, "ejected", a.ID, "name", a.Name)
	}

	all, err := m.store.Agents(ctx)
	if err != nil {
		return fmt.Errorf("read agents: %w", err)
	}
	seen := make(map[int64]exactlyonce.Sharding, len(all))
	for _, a := range all {
		seen[a.ID] = a.Sharding
	}
	m.mu.Lock()
	m.seen = seen
	m.mu.Unlock()
	// The agents without a range (processors, Rangeless) are alive but take no part in the split.
	all = slices.DeleteFunc(all, func(a exactlyonce.Agent) bool { return a.Sharding == exactlyonce.ShardingNone })
	pos := -1
	for i, a := range all {
		if a.ID == id {
			pos = i
		}
	}
	if pos < 0 {
		m.ejected("its row vanished between its pulse and its read of the agents")
		return errors.New("ejected during the pulse; it registers again at the next")
	}
	self := all[pos]
	state, total, index, why := decide(all, pos, m.cfg.Static, m.cfg.Handover)
	if self.State != state || !sameAssignment(self, total, index) {
		ok, err := m.store.AssignAgent(ctx, id, state, total, index)
		if err != nil {
			return fmt.Errorf("persist assignment: %w", err)
		}
		if !ok {
			m.ejected("its row vanished before it could persist its assignment")
			return errors.New("ejected during the pulse; it registers again at the next")
		}
		m.logChange(self, state, total, index, why)
		if !sameAssignment(self, total, index) {
			metrics.From(ctx).Add(metrics.ShardChanges, 1)
		}
		self.State, self.TotalShardCount, self.AssignedShardIndex = state, total, index
	} else if state == exactlyonce.AgentSuspended {
		m.log.Error("agent: suspended, processing nothing", "agent", id, "why", why)
	}
	m.mu.Lock()
	m.self, m.why = self, why
	m.mu.Unlock()
	return nil
}

func (m *Member) ejected(why string) {
	m.Stats.Ejected.Add(1)
	m.mu.Lock()
	id := m.self.ID
	m.registered = false
	m.mu.Unlock()
	m.log.Error("agent: ejected; it stops claiming and registers again as a new agent", "agent", id, "why", why)
}

func (m *Member) logChange(old exactlyonce.Agent, state exactlyonce.AgentState, total, index *int, why string) {
	args := []any{"agent", old.ID}
	if old.State != state {
		args = append(args, "from", old.State, "to", state)
	}
	if total != nil && index != nil {
		r, _ := exactlyonce.ShardRange(*index, *total)
		args = append(args, "shard", *index, "of", *total, "range", r.String())
	}
	if why != "" {
		args = append(args, "why", why)
	}
	switch {
	case state == exactlyonce.AgentSuspended:
		m.log.Error("agent: suspended, processing nothing", args...)
	case old.State == state:
		// The same state with another shard ("WAITING from WAITING to WAITING" said nothing).
		m.log.Info("agent: "+string(state)+", its shard changed", args...)
	default:
		m.log.Info("agent: "+string(state), args...)
	}
}

// Leave deletes the agent's row, so that the others take its range at their next pulse rather than
// after its expiration. The agent must not claim afterwards.
func (m *Member) Leave(ctx context.Context) error {
	m.mu.Lock()
	registered, id := m.registered, m.self.ID
	m.registered = false
	m.mu.Unlock()
	if !registered {
		return nil
	}
	if err := m.store.RemoveAgent(ctx, id); err != nil {
		return err
	}
	m.log.Info("agent: left", "agent", id)
	return nil
}

func sameAssignment(a exactlyonce.Agent, total, index *int) bool {
	if total == nil || index == nil {
		return a.TotalShardCount == nil && a.AssignedShardIndex == nil
	}
	return a.Assigned(*total, *index)
}

// decide returns the state and assignment agent all[pos] should persist, given every agent ordered
// by id, and why it is not RUNNING. An agent whose persisted assignment differs from its target
// writes WAITING with the target first; it turns RUNNING only when it finds every member WAITING or
// RUNNING with the shard count and index expected of it, so that no two RUNNING agents' ranges
// overlap: an agent RUNNING on a count saw every member persist that count, and a member changes
// its count only by writing WAITING first.
func decide(all []exactlyonce.Agent, pos int, static *Shard, handover bool) (state exactlyonce.AgentState, total, index *int, why string) {
	self := all[pos]
	want := exactlyonce.ShardingDynamic
	if static != nil {
		want = exactlyonce.ShardingStatic
	}
	for _, a := range all {
		if a.Sharding != want {
			return exactlyonce.AgentSuspended, self.TotalShardCount, self.AssignedShardIndex,
				fmt.Sprintf("agent %d (%s) uses %s sharding and this one %s: every agent must use the same "+
					"(set SHARDS_TOTAL and SHARDS_ASSIGNED on all of them, or on none)", a.ID, a.Name, a.Sharding, want)
		}
	}
	if static != nil {
		return decideStatic(all, pos, *static, handover)
	}
	// Dynamic: the members are the agents not suspended, the target the position among them.
	var members []exactlyonce.Agent
	at := -1
	for i, a := range all {
		if i == pos {
			at = len(members)
			members = append(members, a)
		} else if a.State != exactlyonce.AgentSuspended {
			members = append(members, a)
		}
	}
	n := len(members)
	total, index = new(n), new(at)
	if !self.Assigned(n, at) || self.State == exactlyonce.AgentSuspended {
		return exactlyonce.AgentWaiting, total, index, fmt.Sprintf("its assignment changed to shard %d of %d", at, n)
	}
	if self.State == exactlyonce.AgentRunning {
		return exactlyonce.AgentRunning, total, index, ""
	}
	for j, a := range members {
		if (a.State != exactlyonce.AgentWaiting && a.State != exactlyonce.AgentRunning) || !a.Assigned(n, j) {
			return exactlyonce.AgentWaiting, total, index,
				fmt.Sprintf("agent %d (%s) has not yet taken shard %d of %d", a.ID, a.Name, j, n)
		}
	}
	return exactlyonce.AgentRunning, total, index, ""
}

func decideStatic(all []exactlyonce.Agent, pos int, s Shard, handover bool) (exactlyonce.AgentState, *int, *int, string) {
	self := all[pos]
	total, index := new(s.Total), new(s.Index)
	for i, a := range all {
		if i == pos || a.TotalShardCount == nil {
			continue
		}
		if *a.TotalShardCount != s.Total {
			return exactlyonce.AgentSuspended, total, index, fmt.Sprintf("conflicting SHARDS_TOTAL: this agent has %d, "+
				"agent %d (%s) has %d; every static agent must have the same total", s.Total, a.ID, a.Name, *a.TotalShardCount)
		}
		if a.Assigned(s.Total, s.Index) && a.ID < self.ID && handover && a.State != exactlyonce.AgentSuspended {
			return exactlyonce.AgentWaiting, total, index, fmt.Sprintf("waiting for agent %d (%s) to hand shard %d of %d over",
				a.ID, a.Name, s.Index, s.Total)
		}
		if a.Assigned(s.Total, s.Index) && a.ID < self.ID {
			return exactlyonce.AgentSuspended, total, index, fmt.Sprintf("shard %d of %d (SHARDS_ASSIGNED) is held by "+
				"agent %d (%s), which registered first: two agents cannot hold one shard", s.Index, s.Total, a.ID, a.Name)
		}
	}
	if !self.Assigned(s.Total, s.Index) || self.State == exactlyonce.AgentSuspended {
		return exactlyonce.AgentWaiting, total, index, "registering its static shard"
	}
	if self.State == exactlyonce.AgentRunning {
		return exactlyonce.AgentRunning, total, index, ""
	}
	for i, a := range all {
		if i == pos || a.State == exactlyonce.AgentSuspended {
			continue
		}
		if a.TotalShardCount == nil || (a.State != exactlyonce.AgentWaiting && a.State != exactlyonce.AgentRunning) {
			return exactlyonce.AgentWaiting, total, index, fmt.Sprintf("agent %d (%s) has no shard yet", a.ID, a.Name)
		}
	}
	return exactlyonce.AgentRunning, total, index, ""
}
