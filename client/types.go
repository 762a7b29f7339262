package client

import (
	"encoding/json"
	"time"
)

// The API's answers, as openapi.yaml describes them (components/schemas). Times are UTC.

// Event is a plain event (GET /events/{id} of an event with no url, POST /events).
type Event struct {
	ID           int64      `json:"id"`
	Value        *string    `json:"value"` // nil until processed
	State        string     `json:"state"` // pending, processing, queued, processed or failed
	CreatedAt    *time.Time `json:"createdAt,omitempty"`
	ProcessedAt  *time.Time `json:"processedAt,omitempty"`
	ProcessedBy  string     `json:"processedBy,omitempty"` // api, processor, sweeper or agent
	ProcessCount int        `json:"processCount"`
	// Attempts, LastError and NextAttemptAt appear once its work has failed.
	Attempts      int        `json:"attempts,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
	NextAttemptAt *time.Time `json:"nextAttemptAt,omitempty"`

	// Replayed is true when a create's answer was the one stored for its Idempotency-Key (the
	// create had happened already; nothing new was stored).
	Replayed bool `json:"-"`
}

// Created is an async create's answer: the event's or task's id.
type Created struct {
	ID       int64 `json:"id"`
	Replayed bool  `json:"-"` // as Event.Replayed
}

// NewTask is a task to create: a webhook, delivered in order per ReferenceID.
type NewTask struct {
	URL string `json:"url"`
	// Payload is any JSON value, at most 256 KiB, nesting at most 64 deep, whose numbers are within
	// float64's range (1e400 is refused: most JSON readers cannot read it back; send it as a string)
	// whose strings hold no lone surrogate escape ("\ud800", which Go reads as U+FFFD), and none
	// of whose objects gives a name twice (readers disagree on which value they read).
	Payload     json.RawMessage `json:"payload,omitempty"`
	ReferenceID string          `json:"referenceId,omitempty"`
	MaxRetries  *int            `json:"maxRetries,omitempty"` // nil: the API's default, 3
}

// Task is a task as GET /events/{id} shows it.
type Task struct {
	ID               int64           `json:"id"`
	Kind             string          `json:"kind"`  // "task"
	State            string          `json:"state"` // pending, queued, processing, completed or failed
	URL              string          `json:"url"`
	Payload          json.RawMessage `json:"payload"`
	ReferenceID      *string         `json:"referenceId"`
	MaxRetries       int             `json:"maxRetries"`
	CreatedAt        time.Time       `json:"createdAt"`
	CompletedAt      *time.Time      `json:"completedAt"`
	IsCompleted      bool            `json:"isCompleted"`
	IsFailed         bool            `json:"isFailed"`
	ExceptionMessage *string         `json:"exceptionMessage"`
	Attempts         int             `json:"attempts"`
	NextAttemptAt    *time.Time      `json:"nextAttemptAt"`
	ProcessedBy      string          `json:"processedBy,omitempty"`
}

// Item is what GET /events/{id} and a listing show: an event or a task, the other nil.
type Item struct {
	Event *Event
	Task  *Task
}

// ID is the item's id.
func (it Item) ID() int64 {
	if it.Task != nil {
		return it.Task.ID
	}
	if it.Event != nil {
		return it.Event.ID
	}
	return 0
}

// State is the item's state.
func (it Item) State() string {
	if it.Task != nil {
		return it.Task.State
	}
	if it.Event != nil {
		return it.Event.State
	}
	return ""
}

func (it *Item) UnmarshalJSON(b []byte) error {
	var probe struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return err
	}
	if probe.Kind == "task" {
		it.Task = new(Task)
		return json.Unmarshal(b, it.Task)
	}
	it.Event = new(Event)
	return json.Unmarshal(b, it.Event)
}

// ListOptions select a page of GET /events?state=.
type ListOptions struct {
	State  string // required: pending, processing, queued, processed or failed
	Kind   string // "", plain or task
	Before string // the Next of the previous page
	Limit  int    // 1 to 100; 0: the API's default, 50
}

// EventPage is a page of events of one state, newest first.
type EventPage struct {
	State  string  `json:"state"`
	Kind   *string `json:"kind"`
	Events []Item  `json:"events"`
	Next   *string `json:"next"` // nil at the end
}

// Attempt is one delivery attempt of a task.
type Attempt struct {
	Number     int       `json:"number"`
	StartedAt  time.Time `json:"startedAt"`
	DurationMs float64   `json:"durationMs"`
	Status     *int      `json:"status"`
	Error      *string   `json:"error"`
}

// RetriedTask is POST /events/{id}/retry's answer.
type RetriedTask struct {
	ID        int64  `json:"id"`
	State     string `json:"state"`     // pending, or queued behind the open task of its reference
	Placement string `json:"placement"` // in-place, end or unordered
}

// ReferenceTask is a task in its reference's listing.
type ReferenceTask struct {
	ID        int64      `json:"id"`
	State     string     `json:"state"`
	Attempts  int        `json:"attempts"`
	CreatedAt time.Time  `json:"createdAt"`
	SettledAt *time.Time `json:"settledAt"`
}

// ReferencePage is a page of a reference's tasks, in delivery order.
type ReferencePage struct {
	ReferenceID string          `json:"referenceId"`
	Events      []ReferenceTask `json:"events"`
	Next        *int64          `json:"next"` // nil at the end
}

// RetriedReference is POST /references/{referenceId}/retry's answer. RetryReference follows the
// API's parts until none remains: Retried holds them all, and More is false.
type RetriedReference struct {
	ReferenceID string  `json:"referenceId"`
	Retried     []int64 `json:"retried"`
	Placement   *string `json:"placement"` // nil when none had failed
	More        bool    `json:"more"`      // failed tasks remain for a later call (RetryReferencePart)
}

// Overview is the events by state, exact, on the database's clock.
type Overview struct {
	Time   time.Time `json:"time"`
	Events struct {
		Pending    int64 `json:"pending"`
		Processing int64 `json:"processing"`
		Queued     int64 `json:"queued"`
		Processed  int64 `json:"processed"`
		Failed     int64 `json:"failed"`
		Total      int64 `json:"total"`
	} `json:"events"`
	Waiting              int64    `json:"waiting"`
	OldestWaitingSeconds *float64 `json:"oldestWaitingSeconds"`
}

// History is how much of the history each tier holds: the events not packed yet, those packed
// into page rows (Pages.Rows is the table's estimate when RowsEstimated), and the pages archived to
// S3 (nil when the stack archives nothing). Total is GET /events's count.
type History struct {
	Time   time.Time `json:"time"`
	Total  int64     `json:"total"`
	Events struct {
		Rows int64 `json:"rows"`
	} `json:"events"`
	Pages struct {
		Events        int64 `json:"events"`
		Rows          int64 `json:"rows"`
		RowsEstimated bool  `json:"rowsEstimated"`
	} `json:"pages"`
	Archive *struct {
		Pages  int64 `json:"pages"`
		Events int64 `json:"events"`
	} `json:"archive"`
}

// Agent is a registered agent and its hash range.
type Agent struct {
	ID                 int64     `json:"id"`
	Name               string    `json:"name"`
	Kind               string    `json:"kind"`
	Sharding           string    `json:"sharding"` // dynamic, static, or none
	State              string    `json:"state"`
	TotalShardCount    *int      `json:"totalShardCount"`
	AssignedShardIndex *int      `json:"assignedShardIndex"`
	Expiration         time.Time `json:"expiration"`
	CreatedAt          time.Time `json:"createdAt"`
	LastPulseAt        time.Time `json:"lastPulseAt"`
}

// Worker is an event worker: the record of which references an owner serves.
type Worker struct {
	WorkerID          string    `json:"workerId"`
	AgentID           int64     `json:"agentId"`
	CreatedAt         time.Time `json:"createdAt"`
	LastCompletedTask *int64    `json:"lastCompletedTask"`
	TasksRemaining    int64     `json:"tasksRemaining"`
	WillTerminate     bool      `json:"willTerminate"`
	TasksCompleted    int64     `json:"tasksCompleted"`
	TasksFailed       int64     `json:"tasksFailed"`
	MaxReferenceCount int       `json:"maxReferenceCount"`
	IsDone            bool      `json:"isDone"`
	References        []string  `json:"references"`
}

// WorkerList is GET /workers's answer: the event workers, and whether the API left some out.
type WorkerList struct {
	Workers []Worker `json:"workers"`
	// Truncated is true when the list ended at 4 MiB with workers left out.
	Truncated bool `json:"truncated"`
}

// Count is one count of the counter service.
type Count struct {
	Sum     int64 `json:"sum"`
	Version int64 `json:"version"`
}
