package chaos

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// Config shapes a run. Zero values take the defaults shown.
type Config struct {
	// Duration is how long clients create events while things fail. Default 60 s.
	Duration time.Duration
	// Clients is the number of concurrent API clients. Default 8.
	Clients int
	// Processors and Sweepers are the processes kept running (and killed). Defaults 2 and 2.
	Processors, Sweepers int
	// APIs are the API processes kept running (and killed), built as `make run` builds its API:
	// POST /events/async answers on commit and an outbox sends the messages within
	// wire.DefaultAsyncLinger. Clients spread their creates over the live ones. Default 1.
	APIs int
	// Contenders are processes that play a foreign transaction (an operator's query, a batch job):
	// they hold the counter's row lock, and the row locks of the open events, for longer than the
	// lock wait timeout, and take them in an order that deadlocks with a settling process, so that
	// the store's retry helper has deadlocks and lock wait timeouts to retry. Default 1; negative:
	// none.
	Contenders int
	// LockWaitTimeout is innodb_lock_wait_timeout, in seconds, of every session of the run (set in
	// the DSN every process connects with). Default 1.
	LockWaitTimeout int
	// RequireRetries makes a run in which no transaction was retried (no deadlock or lock wait
	// timeout was met, so the retry helper's retry branch never ran) a violation.
	RequireRetries bool
	// KillEvery is the mean pause between two kills of a random process (a processor, a sweeper or
	// an API). Default 1.5 s.
	KillEvery time.Duration
	// DBRestarts is how many times the database is restarted, alternately stopped and killed.
	// Default 2; at least 1.
	DBRestarts int
	// Poison is the number of malformed messages injected into the queue. Default 6.
	Poison int
	// Visibility is the queue's visibility timeout in seconds (default 3); MaxReceive its
	// receive limit before the DLQ (default 10).
	Visibility, MaxReceive int
	// Packers are processes that fold and pack as a sweeper's maintenance does, but over and over,
	// a unit or two at a time, their packs dawdling at random between statements, so that packs
	// overlap each other's, the sweepers' and the late creates' in every way; they are
	// killed like the others.
	// Default 3; negative: none. None either with KeepHistory.
	Packers int
	// LateEvery is the mean pause between two rounds of late creates (late.go): events created
	// with ids taken before the counter moved two units and more past them, on a page nobody has
	// packed yet. Default 100 ms; negative: none.
	LateEvery time.Duration
	// SweepGrace leaves pending events younger than this to the queue. Default 3 s.
	SweepGrace time.Duration
	// KeepHistory: the sweepers do not pack the folded history into pages (sweeping.Config), so
	// that a test can break the events table's invariants by hand in the table (the checker's test).
	// The chaos runs themselves pack.
	KeepHistory bool
	// Settle bounds the wait, after the clients stop, for every event to be processed and the
	// poison to reach the DLQ. Default 120 s.
	Settle time.Duration
	// SQSEndpoint is the SQS endpoint; empty starts a local goaws (bin/sqslocal).
	SQSEndpoint string
	// Self is the executable started for processes, with child.RoleEnv naming the role (its main
	// must call RunProcess then). Default os.Args[0].
	Self string
	// Log receives progress lines. Default: discarded.
	Log io.Writer
	// Seed makes the schedule of kills reproducible. Default: random.
	Seed uint64
	// Lease is how long the processes that take the lease path hold an event (every second process
	// started does: its plain events are leased, worked outside the claim's transaction and
	// settled under the lease's guard). Default 2 s, so that a killed process's leases expire
	// within the run.
	Lease time.Duration
	// TaskEvery makes every TaskEvery-th async create of a client a task, an event with a webhook,
	// delivered to a receiver in this process (tasks.go). Default 3; negative: no tasks.
	TaskEvery int
	// KeyEvery makes every KeyEvery-th create of a client carry an Idempotency-Key, sent again with
	// it after a connection error, a 5xx or a 409 until an API acknowledges it: the checker then
	// wants one event for the key, one stored key, and the same answer on a replay. Default 4;
	// negative: none.
	KeyEvery int
	// BeforeCheck, when set, runs after the system settled and before the checker: the checker's
	// own test uses it to break the invariants on purpose and see each violation reported. reports
	// is the directory of the processes' report files (internal/verify).
	BeforeCheck func(ctx context.Context, db *sql.DB, client *sqs.Client, q queue.Queues, reports string) error
}

func (c *Config) defaults() {
	c.Duration = cmp.Or(c.Duration, 60*time.Second)
	c.Clients = cmp.Or(c.Clients, 8)
	c.Processors = cmp.Or(c.Processors, 2)
	c.Sweepers = cmp.Or(c.Sweepers, 2)
	c.APIs = cmp.Or(c.APIs, 1)
	c.Contenders = max(cmp.Or(c.Contenders, 1), 0)
	c.Packers = max(cmp.Or(c.Packers, 3), 0)
	if c.KeepHistory {
		c.Packers = 0
	}
	c.LateEvery = max(cmp.Or(c.LateEvery, 100*time.Millisecond), 0)
	c.LockWaitTimeout = cmp.Or(c.LockWaitTimeout, 1)
	c.KillEvery = cmp.Or(c.KillEvery, 1500*time.Millisecond)
	c.Lease = cmp.Or(c.Lease, 2*time.Second)
	c.DBRestarts = max(cmp.Or(c.DBRestarts, 2), 1)
	c.Poison = cmp.Or(c.Poison, 6)
	c.Visibility = cmp.Or(c.Visibility, 3)
	c.MaxReceive = cmp.Or(c.MaxReceive, 10)
	c.SweepGrace = cmp.Or(c.SweepGrace, 3*time.Second)
	c.Settle = cmp.Or(c.Settle, 120*time.Second)
	c.TaskEvery = max(cmp.Or(c.TaskEvery, 3), 0)
	c.KeyEvery = max(cmp.Or(c.KeyEvery, 4), 0)
	c.Self = cmp.Or(c.Self, os.Args[0])
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
}

// Report holds the figures of a run and the violations the checker found.
type Report struct {
	Seed     uint64
	Duration time.Duration // the whole run, settling included

	// Creates acknowledged (201 / 202 with an id), and refused (503: the database was restarting,
	// or a transaction gave up its retries).
	SyncCreates, AsyncCreates int
	Refused                   int
	// NoAnswer counts creates that reached an API and got no HTTP answer: the API process was
	// killed while it served them. They may or may not have committed.
	NoAnswer int
	// Unreachable counts creates whose connection was refused (the API process had just been
	// killed): no API received them, so none of them can have stored anything.
	Unreachable int
	// OtherStatuses counts any other answer to a create, by status (none is expected).
	OtherStatuses map[int]int
	// Orphans are events stored whose create the client saw fail (a commit whose answer was lost
	// while the database went down, an API killed between its commit and its answer): allowed up to
	// Refused + NoAnswer, and processed like any other.
	Orphans int

	ProcessorKills, SweeperKills, APIKills, PackerKills int
	ProcessStarts, DBStops, DBKills                     int
	PoisonInjected, PoisonInDLQ                         int

	// Figures of the store's retry helper and the mapping, summed over every process (APIs,
	// processors, sweepers).
	Deadlocks, LockWaitTimeouts, Retries, GaveUp int64
	RetriesByRole                                map[string]int64 // the Retries, by the role of the process that retried
	// What the contenders did: lock holds, and the deadlocks and lock wait timeouts they lost
	// themselves (a deadlock InnoDB resolved by rolling back the contender, not a process).
	ContenderHolds, ContenderDeadlocks, ContenderTimeouts int64
	Received, Deleted, Failed, Extended                   int64
	ProcessedByProcessor, ProcessedBySweeper              int

	// Reports are the settlements the processes reported (internal/verify); Unreported the events
	// settled by a claim whose process reported starting it but not what it settled (killed between
	// the commit and the report, or its commit's answer lost with the database).
	Reports, Unreported int

	// What the checker found: DuplicateIDs (ids handed out twice or stored twice), Duplicates
	// (events settled other than exactly once, by the processes' own reports), Lost (acknowledged ids
	// not stored, or events never processed).
	DuplicateIDs, Duplicates, Lost int
	// Tasks acknowledged to their clients, tasks the receiver took (2xx), and deliveries it took
	// again (a process killed between the answer and the settlement: at least once, same webhook-id).
	TasksCreated, TasksDelivered, TaskRepeats int
	CountReported                             int64 // GET /events at the end
	// Packed is how many events the sweepers and packers packed into pages (internal/mysql/pagestore/pages.sql) during
	// the run, under the kills and restarts: the checks above read them there.
	Packed int64
	// KeyedCreates counts the creates sent with an Idempotency-Key, each acknowledged once;
	// KeyedResends the times they were sent again (after a kill, a 5xx, a 409); KeyReplays the
	// acknowledged keys sent once more at the end, each answered as the first time.
	KeyedCreates, KeyedResends, KeyReplays int
	// LateCreates counts the events created with ids taken long before (late.go), acknowledged.
	LateCreates int
	Violations  []string
}

// Kills is the number of processes killed: processors, sweepers and APIs.
func (r *Report) Kills() int { return r.ProcessorKills + r.SweeperKills + r.APIKills + r.PackerKills }

// OK tells whether every invariant held.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// String prints the figures.
func (r *Report) String() string {
	var b strings.Builder
	verdict := "PASS: every invariant held"
	if !r.OK() {
		verdict = fmt.Sprintf("FAIL: %d violations", len(r.Violations))
	}
	fmt.Fprintf(&b, "chaos run (seed %d, %s): %s\n", r.Seed, r.Duration.Round(time.Second), verdict)
	fmt.Fprintf(&b, "  creates acknowledged   %d (sync %d, async %d); refused (503): %d; no answer (API killed): %d; connection refused: %d; other answers: %v\n",
		r.SyncCreates+r.AsyncCreates, r.SyncCreates, r.AsyncCreates, r.Refused, r.NoAnswer, r.Unreachable, r.OtherStatuses)
	fmt.Fprintf(&b, "  keyed creates          %d acknowledged, each once (sent again %d times after kills, 5xx, 409); %d replays answered as the first time\n",
		r.KeyedCreates, r.KeyedResends, r.KeyReplays)
	fmt.Fprintf(&b, "  committed unanswered   %d (stored, processed once; the client saw its create fail)\n", r.Orphans)
	fmt.Fprintf(&b, "  GET /events            %d\n", r.CountReported)
	fmt.Fprintf(&b, "  packed into pages      %d (read from there by every check)\n", r.Packed)
	fmt.Fprintf(&b, "  late creates           %d (ids taken before the counter moved past them, on pages being packed)\n", r.LateCreates)
	fmt.Fprintf(&b, "  kills                  %d (processors %d, sweepers %d, APIs %d, packers %d); process starts %d\n",
		r.Kills(), r.ProcessorKills, r.SweeperKills, r.APIKills, r.PackerKills, r.ProcessStarts)
	fmt.Fprintf(&b, "  database restarts      %d (stopped %d, killed %d)\n", r.DBStops+r.DBKills, r.DBStops, r.DBKills)
	fmt.Fprintf(&b, "  retries                %d (deadlocks %d, lock wait timeouts %d, gave up %d); retried by %v\n",
		r.Retries, r.Deadlocks, r.LockWaitTimeouts, r.GaveUp, r.RetriesByRole)
	fmt.Fprintf(&b, "  contention             %d lock holds past the lock wait timeout; the contender lost %d deadlocks and %d lock waits itself\n",
		r.ContenderHolds, r.ContenderDeadlocks, r.ContenderTimeouts)
	fmt.Fprintf(&b, "  queue                  received %d, acknowledged %d, failed %d, visibility extended %d\n",
		r.Received, r.Deleted, r.Failed, r.Extended)
	fmt.Fprintf(&b, "  processed async by     processor %d, sweeper %d\n", r.ProcessedByProcessor, r.ProcessedBySweeper)
	fmt.Fprintf(&b, "  processes' reports     %d settlements; %d events settled by a process killed before it could report them\n",
		r.Reports, r.Unreported)
	fmt.Fprintf(&b, "  tasks                  %d acknowledged, %d delivered (each reference checked in order), %d deliveries repeated (same webhook-id)\n",
		r.TasksCreated, r.TasksDelivered, r.TaskRepeats)
	fmt.Fprintf(&b, "  poison                 injected %d, in the DLQ %d\n", r.PoisonInjected, r.PoisonInDLQ)
	fmt.Fprintf(&b, "  duplicates found       %d ids, %d effects\n", r.DuplicateIDs, r.Duplicates)
	fmt.Fprintf(&b, "  lost found             %d\n", r.Lost)
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(r.Violations)-20)
			break
		}
		fmt.Fprintf(&b, "  VIOLATION: %s\n", v)
	}
	return b.String()
}
