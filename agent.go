package exactlyonce

import (
	"fmt"
	"time"
)

// An agent is a process that searches the events table for due events (a sweeper, a standalone
// agent): it registers in the agents table, keeps itself alive with a pulse, and processes only the
// events whose routing hash falls in its own range of the 32-bit hash space. The ranges are computed
// at read time from the number of agents, so adding or removing one moves no data. Sharding only
// avoids contention: the claim's SKIP LOCKED and the settle's guard keep processing exactly once
// whatever view of the ranges an agent has (internal/agents).

// AgentState is an agent's state in the agents table.
type AgentState string

const (
	// AgentWaiting: the agent is a member but processes nothing; it waits until every member agrees
	// on the topology (its expected shard count and index). Every agent is persisted WAITING at least
	// once before it runs, and goes back to WAITING whenever its assignment changes.
	AgentWaiting AgentState = "WAITING"
	// AgentRunning: every member agreed on the topology when the agent last looked; it processes the
	// events of its range.
	AgentRunning AgentState = "RUNNING"
	// AgentSuspended: the agent's configuration conflicts with the others' (static sharding: another
	// total, or another agent on its shard; or static and dynamic agents mixed). It keeps pulsing,
	// processes nothing, and says why in its log, until the conflict is gone.
	AgentSuspended AgentState = "SUSPENDED"
)

// Sharding is how an agent's shard is decided.
type Sharding string

const (
	// ShardingDynamic: the shard count is the number of live agents and an agent's index its position
	// among them ordered by id. The default.
	ShardingDynamic Sharding = "dynamic"
	// ShardingStatic: the shard count and index are configured (SHARDS_TOTAL, SHARDS_ASSIGNED).
	ShardingStatic Sharding = "static"
	// ShardingNone: the agent searches for nothing and has no range: the processor, which delivers
	// the tasks its queue messages name through event workers of its own. Its row says it is alive,
	// so that its event workers are not adopted while it runs; the agents that split the hash space
	// leave it out of their topology.
	ShardingNone Sharding = "none"
)

// Agent is one row of the agents table. Times are the database's clock (UTC).
type Agent struct {
	// ID is unique: it is taken from the global id counter under its row lock, like an event's id.
	// Ids grow with registration time, so ordering by id orders agents by age.
	ID       int64
	Name     string // a human-readable name: host, pid, kind
	Kind     string // what runs it: "standalone", "sweeper", ...
	Sharding Sharding
	State    AgentState
	// TotalShardCount and AssignedShardIndex are the assignment the agent last persisted; nil until
	// its first (dynamic agents register without one).
	TotalShardCount    *int
	AssignedShardIndex *int
	// Expiration is when the agent is considered dead unless it pulses again: any agent that finds
	// it past (on the database's clock) deletes its row.
	Expiration  time.Time
	CreatedAt   time.Time
	LastPulseAt time.Time
}

// AgentSpec is what an agent registers with.
type AgentSpec struct {
	Name, Kind string
	Sharding   Sharding
	// Total and Index are a static agent's assignment; a dynamic one registers without (nil).
	Total, Index *int
}

// Assigned tells whether a's persisted assignment is (total, index).
func (a Agent) Assigned(total, index int) bool {
	return a.TotalShardCount != nil && a.AssignedShardIndex != nil &&
		*a.TotalShardCount == total && *a.AssignedShardIndex == index
}

// HashRange is an inclusive range [Lo, Hi] of the 32-bit routing hash space.
type HashRange struct {
	Lo, Hi uint32
}

// AllHashes is the whole hash space: what a lone agent processes.
var AllHashes = HashRange{Lo: 0, Hi: 1<<32 - 1}

// Contains tells whether h is in r.
func (r HashRange) Contains(h uint32) bool { return h >= r.Lo && h <= r.Hi }

func (r HashRange) String() string { return fmt.Sprintf("[%d, %d]", r.Lo, r.Hi) }

// ShardRange returns the hash range of shard index of total: the 32-bit space split into total
// equal ranges, the last one also taking the remainder. total must be at least 1 and index in
// [0, total).
func ShardRange(index, total int) (HashRange, error) {
	if total < 1 || index < 0 || index >= total {
		return HashRange{}, fmt.Errorf("shard %d of %d: the index must be from 0 to total-1, and total at least 1", index, total)
	}
	size := (uint64(1) << 32) / uint64(total)
	lo := uint64(index) * size
	hi := lo + size - 1
	if index == total-1 {
		hi = 1<<32 - 1
	}
	return HashRange{Lo: uint32(lo), Hi: uint32(hi)}, nil
}
