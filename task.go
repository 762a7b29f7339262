package exactlyonce

import (
	"encoding/json"
	"time"
)

// KindTask is an event that carries a webhook: its work is an HTTP POST of its payload to its URL,
// retried on temporary failures, and, for tasks of one reference, delivered in the order the
// tasks were created.
const KindTask Kind = "task"

// Queued is the state of a task that waits for an earlier task of its reference to settle: it is
// open (in the `open`-side partitions) but no claim takes it. When the task before it settles
// (completed or failed), the settling transaction promotes the earliest queued task of the reference
// to Pending. Open states are below 10.
const Queued State = 2

// Task limits, checked by the API before anything is written.
const (
	MaxTaskURLBytes     = 2048
	MaxTaskPayloadBytes = 256 << 10
	// MaxTaskPayloadDepth is how deep a payload may nest arrays and objects. Every answer that
	// shows a task carries its payload up to three levels deeper (a listing: {"events": [{...}]}),
	// and what reads them stops somewhere: encoding/json at 10,000 (the console's proxy, the Go
	// client), Ruby's JSON at 100 by default (a receiver). A payload the request could carry but
	// its answers could not made the console's listings a 502 for everyone.
	MaxTaskPayloadDepth   = 64
	MaxTaskRetries        = 25
	DefaultTaskMaxRetries = 3
)

// NewTask is a task as a producer asks for it.
type NewTask struct {
	URL string
	// Payload is the exact body every delivery posts (JSON; "null" when the producer gave none).
	Payload json.RawMessage
	// ReferenceID orders the task after every earlier task of the same reference; empty orders it
	// with nothing.
	ReferenceID string
	// MaxRetries is how many times a temporary failure is retried before the task fails.
	MaxRetries int
}

// Task is what a task event carries, beside the event's own fields.
type Task struct {
	URL         string
	Payload     json.RawMessage
	ReferenceID string
	MaxRetries  int
	// Position orders the tasks of one reference: increasing in the order they were created (and a
	// task manually retried to the end of its reference's queue takes a new one). 0 for a task
	// without a reference.
	Position int64
	// Hash is the routing hash: of the reference (so that a reference's tasks fall in one agent's
	// range), or of the id for a task without one.
	Hash uint32
	// WorkerID is the event worker that holds the task's reference (internal/processing's
	// EventService); empty until one does, and for a task without a reference.
	WorkerID string
	// RetryBase is how many attempts the task had made when it was last retried by hand (0 if
	// never): its attempts are numbered across its whole life (Event.Attempts + 1 is the next), and
	// its retry budget, MaxRetries retries, counts the attempts after RetryBase.
	RetryBase int
}

// TaskState is a task's state under the names of the task API: pending (claimable, or waiting its
// backoff), queued (waiting behind an earlier task of its reference), processing, completed or
// failed. Every read says the same: GET /events/{id}, the listings and the overview's counts.
func TaskState(s State) string {
	switch {
	case s == Queued:
		return "queued"
	case s == Processing:
		return "processing"
	case s == Processed:
		return "completed"
	case s == Failed:
		return "failed"
	default:
		return "pending"
	}
}

// Attempt is one delivery attempt of a task.
type Attempt struct {
	Number   int
	Started  time.Time
	Duration time.Duration
	// Status is the receiver's HTTP status, 0 when none came (a connection error, a timeout, a
	// refused address).
	Status int
	// Error says why the attempt failed; empty for a delivered one.
	Error string
}

// RetryPlacement says where a manually retried task went in its reference's order.
type RetryPlacement string

const (
	// RetryInPlace: no later task of the reference had started, so the retried task is delivered
	// before them, in its original place.
	RetryInPlace RetryPlacement = "in-place"
	// RetryAtEnd: a later task had started (or settled), so the retried task goes after every task
	// of its reference open now.
	RetryAtEnd RetryPlacement = "end"
	// RetryAlone: the task has no reference; it is simply pending again.
	RetryAlone RetryPlacement = "unordered"
)

// CreatedTask is one task a create stored.
type CreatedTask struct {
	ID int64
	// Head tells whether the task is pending now (it heads its reference, or has none): a queue
	// message may name it. A task that is not is queued behind an earlier task of its reference, and
	// the settlement of that task hands it on.
	Head bool
}

// RetriedReference is what the retry of a reference's failed tasks did: the tasks it retried, in
// their new delivery order, where they went, and the one that heads the reference now, if any (a
// queue message may name it).
type RetriedReference struct {
	IDs       []int64
	Placement RetryPlacement
	Head      int64 // 0: the reference's head is a task that was open before, or is held (More)
	// More: failed tasks of the reference remain, which the retry puts back in later parts (it
	// retries a bounded part per transaction and stops at a time budget): call it again. Until its
	// last part, the head it made is held (not due), so the reference delivers nothing meanwhile;
	// behind a task open now, the last task its first part placed is held, and the reference
	// delivers nothing past it.
	More bool
}

// TaskOutcome is what one delivery attempt of a leased task came to.
type TaskOutcome struct {
	// Event is the task as it was leased (Event.Task set).
	Event   Event
	Attempt Attempt
	// Delivered: the receiver took it; the task completes. Otherwise the attempt failed: Final fails
	// the task for good now (a permanent failure, or its retries spent); else it waits Wait and is
	// tried again. Attempt.Error is the reason kept on the task.
	Delivered bool
	Final     bool
	Wait      time.Duration
}

// TaskSettlement is what the settlement of a group of task outcomes did.
type TaskSettlement struct {
	// Completed and GaveUp are the tasks settled (completed, or failed for good); Retrying those
	// that wait their backoff. A task in none was not the claim's any more (its lease was taken
	// over), and nothing was written for it.
	Completed, GaveUp, Retrying []int64
	// Next are the tasks promoted to head their references, leased to the claim (when the
	// settlement was asked to chain): work them next. Otherwise they are pending, for any worker.
	Next []Event
}

// EventWorker is one event worker of the registry (GET /workers): its id, the agent that runs it,
// its state and counts (maxReferenceCount, willTerminate, isDone, ...), and the references it holds.
type EventWorker struct {
	ID                string
	AgentID           int64
	CreatedAt         time.Time
	LastCompletedTask *int64
	TasksRemaining    int64
	WillTerminate     bool
	TasksCompleted    int64
	TasksFailed       int64
	MaxReferenceCount int
	IsDone            bool
	References        []string
	// FirstHash is the routing hash of its first reference: the agent whose range holds it adopts
	// the worker when its own agent is gone.
	FirstHash uint32
}

// WorkerAssignment is what one assignment of an EventService writes: the workers it creates, the
// live workers it grows, and which worker each task of the claim joins.
type WorkerAssignment struct {
	New   []EventWorker
	Grow  []WorkerGrowth
	Tasks map[string][]int64 // worker id: task ids leased to the claim
}

// DraftWorkers lets a chaining settlement give an event worker to the tasks it promotes behind
// event workers with no room for them, in its own transaction: Draft is the EventService's
// assignment of those tasks (each has its ID and its Task's ReferenceID and Hash), drafted once the
// settlement knows which they are; the settlement writes the drafted workers (New, Grow, guarded by
// Agent as an assignment's) and names each task's worker (Tasks) in the statement that promotes it.
// So the tasks handed on to the claim have their event worker with no transaction of their own.
// Draft may be called again if the transaction is run again; only the last call's draft commits.
//
// Room, if set, tells what the EventService knows of an event worker's room: known is false for a
// worker that is not one of its own; room false for one it knows to be full (it made it full, or read
// it so, in a transaction that committed, and nothing clears will_terminate: certain), true for one
// it last knew with room (a guess: another agent may have adopted it and filled it since). The
// settlement promotes nothing into a worker known full, and checks a guessed room in the statement
// that promotes (a wrong guess rolls the settlement back with a *WorkerConflictError naming the
// worker, which the EventService forgets); it reads the room of the others before its draft.
// Called in the settlement's transaction, as Draft.
type DraftWorkers struct {
	Agent int64
	Draft func(tasks []Event) WorkerAssignment
	Room  func(workerID string) (room, known bool)
}

// WorkerGrowth is a live worker's change in an assignment.
type WorkerGrowth struct {
	ID            string
	AddTasks      int64
	References    []string
	WillTerminate bool
}

// WorkerConflictError says that an assignment named an event worker that cannot take tasks from
// this agent: its agent no longer runs it (it is done, or another agent adopted it), or it is full
// (willTerminate). The EventService forgets it.
type WorkerConflictError struct{ WorkerID string }

func (e *WorkerConflictError) Error() string {
	return "event worker " + e.WorkerID + " is not a live worker of this agent with room"
}
