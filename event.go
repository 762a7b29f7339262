// Package exactlyonce is the domain: events, their states, the outcomes of processing them and the
// errors that the edges (HTTP, SQS) translate for callers. One entity per file. It imports only the
// standard library; every other package of the module depends on it, never the reverse.
package exactlyonce

import "time"

// State is where an event is in its life. It is stored as a TINYINT and it is the key the events
// table is partitioned by, so that pending events sit apart from processed history.
type State int8

const (
	// Pending events have no value yet; the processor or a sweeper will give them one.
	// Open states are below 10 (room is left for a retrying state).
	Pending State = 0
	// Processing events are leased to one worker until their lease expires: the worker does their
	// work outside any transaction and then settles them, guarded by its lease. An expired lease
	// makes the event claimable again.
	Processing State = 1
	// Processed events have their value. An event is processed exactly once.
	// Settled states are 10 and above.
	Processed State = 10
	// Failed events ran out of attempts: their work failed MaxAttempts times (Backoff), and the last
	// error is kept. They are settled, never claimed again.
	Failed State = 20
)

// Settled tells whether s is a settled state (10 and above): the event's work is over and it is
// never claimed again. The events table is partitioned on this boundary.
func (s State) Settled() bool { return s >= Processed }

func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Processing:
		return "processing"
	case Queued:
		return "queued"
	case Processed:
		return "processed"
	case Failed:
		return "failed"
	default:
		return "unknown"
	}
}

// Event is one stored event.
type Event struct {
	ID    int64
	Kind  Kind
	Value *string // nil until processed
	State State
	// CreatedAt and ProcessedAt are the database's clock (UTC).
	CreatedAt   time.Time
	ProcessedAt *time.Time
	// ProcessedBy names the path that processed the event: "api" (synchronous create),
	// "processor" (the SQS consumer), "sweeper" (a sweeper agent) or "agent" (the standalone agent):
	// the By* constants below.
	ProcessedBy string
	// ProcessCount counts the writes that processed the event. Exactly-once means it is 1 for
	// every processed event and 0 for every pending one; it exists so that a violation is visible.
	ProcessCount int
	// Attempts counts the failed attempts of its work; LastError is the last failure's reason and
	// NextAttemptAt when it may be tried again (nil when it has not failed).
	Attempts      int
	LastError     string
	NextAttemptAt *time.Time
	// Task is set for a task (Kind KindTask): its webhook and its place in its reference's order.
	Task *Task
}

// Who processed an event (Event.ProcessedBy): the path that really settled it.
const (
	ByAPI       = "api"       // a sync create, processed at birth
	ByProcessor = "processor" // the queue's consumer
	BySweeper   = "sweeper"   // a sweeper agent: the scheduled Lambda's, the local runner's
	ByAgent     = "agent"     // the standalone agent (cmd/agent)
)
