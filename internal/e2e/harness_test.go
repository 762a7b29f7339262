package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mapping"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// recorder wraps the processor's handler and records every delivery, failure and acknowledgement
// per message, and checks, at the moment of each acknowledgement, that the event it names is
// committed as settled: "nothing acknowledged that was not committed". That it was settled once is
// the workers' reports' to show (checkSettled).
type recorder struct {
	check      *sql.DB // reads event states, on its own pool
	checkStore *wire.Stores

	mu         sync.Mutex
	deliveries map[string]int    // messageId -> times handed to the handler
	failures   map[string]int    // messageId -> times reported failed
	acks       map[string]int    // messageId -> times reported succeeded (the mapping deletes it)
	bodies     map[string]string // messageId -> body
	violations []string          // acknowledgements of events that were not committed as processed
	ackGate    func() bool       // when set and false, any acknowledgement is a violation
}

func newRecorder(check *sql.DB) *recorder {
	checkStore, err := wire.StoresOn(check, mysql.Config{})
	if err != nil {
		panic(err)
	}
	return &recorder{check: check, checkStore: checkStore, deliveries: map[string]int{}, failures: map[string]int{},
		acks: map[string]int{}, bodies: map[string]string{}}
}

func (r *recorder) wrap(h mapping.Handler) mapping.Handler {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		r.mu.Lock()
		for _, m := range ev.Records {
			r.deliveries[m.MessageId]++
			r.bodies[m.MessageId] = m.Body
		}
		r.mu.Unlock()
		resp, err := h(ctx, ev)
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		var acked []events.SQSMessage
		for _, m := range ev.Records {
			if err != nil || failed[m.MessageId] {
				continue
			}
			acked = append(acked, m)
		}
		r.verify(acked)
		r.mu.Lock()
		for _, m := range ev.Records {
			if err != nil || failed[m.MessageId] {
				r.failures[m.MessageId]++
			} else {
				r.acks[m.MessageId]++
			}
		}
		r.mu.Unlock()
		return resp, err
	}
}

// verify checks, before the mapping deletes them, that every acknowledged message names an event
// committed as settled.
func (r *recorder) verify(acked []events.SQSMessage) {
	if len(acked) == 0 {
		return
	}
	r.mu.Lock()
	gate := r.ackGate
	r.mu.Unlock()
	var bad []string
	if gate != nil && !gate() {
		bad = append(bad, fmt.Sprintf("%d messages acknowledged while the database was down", len(acked)))
	}
	for _, m := range acked {
		ids, err := queue.Decode(m.Body)
		if err != nil {
			bad = append(bad, "malformed message acknowledged: "+strconv.Quote(m.Body))
			continue
		}
		for _, id := range ids {
			var state exactlyonce.State
			var qerr error
			// The database may be going away or coming back: retry the read, never the verdict.
			for attempt := 0; attempt < 300; attempt++ {
				qerr = r.check.QueryRow("SELECT state FROM events WHERE id = ?", id).Scan(&state)
				if qerr == sql.ErrNoRows {
					// Not in `events`: the sweeper may have packed it (Get reads its page).
					var e exactlyonce.Event
					e, qerr = r.checkStore.Events.Get(context.Background(), id)
					state = e.State
					if exactlyonce.ErrorCode(qerr) == exactlyonce.ENOTFOUND {
						break
					}
				}
				if qerr == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if qerr != nil || !state.Settled() {
				bad = append(bad, fmt.Sprintf("message %s acknowledged; event %d is %s, err=%v", m.MessageId, id, state, qerr))
			}
		}
	}
	if len(bad) > 0 {
		r.mu.Lock()
		r.violations = append(r.violations, bad...)
		r.mu.Unlock()
	}
}

func (r *recorder) get(m map[string]int, id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m[id]
}

func (r *recorder) body(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[id]
}

func (r *recorder) totals() (deliveries, failures, acks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.deliveries {
		deliveries += n
	}
	for _, n := range r.failures {
		failures += n
	}
	for _, n := range r.acks {
		acks += n
	}
	return
}

func (r *recorder) requireNoViolations(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.violations, "nothing may be acknowledged that was not committed")
}

// rig is a queue, a database and the processor behind the local event source mapping, recorded.
// Every worker it runs reports its settlements to ledger: its processor, its sweepers
// (r.sweeper), its engines (r.engine) and its child processes (r.child, each through a file of
// its own, read into the ledger by r.settledOnce once the child is gone).
type rig struct {
	t      *testing.T
	store  *wire.Stores
	db     *sql.DB
	client *sqs.Client
	q      queue.Queues
	proc   *processing.Processor
	rec    *recorder
	ledger *verify.Ledger
	// checkStore reads the table for the checks, on the check pool (rigOptions.check).
	checkStore *wire.Stores
	children   []reportingChild // child processes whose reports are not read yet
}

type reportingChild struct {
	proc    *child.Process
	reports string
}

type rigOptions struct {
	visibility, maxReceive int
	db                     *sql.DB // default: a new isolated database on the shared server
	check                  *sql.DB // default: db
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	db := o.db
	if db == nil {
		db, _ = testdb.DB(t, 8)
	}
	check := o.check
	if check == nil {
		check = db
	}
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	client := localsqs.Client(t)
	checkStore, err := wire.StoresOn(check, mysql.Config{})
	require.NoError(t, err)
	r := &rig{t: t, store: store, db: db, client: client, q: localsqs.Queues(t, client, o.visibility, o.maxReceive),
		rec: newRecorder(check), ledger: verify.NewLedger(), checkStore: checkStore}
	r.proc = &processing.Processor{Engine: processing.Engine{Store: store.Events, TaskStore: store.Tasks, Logger: testLogger(), Report: r.ledger}}
	return r
}

// sweeper returns a sweeper on the rig's store that reports to the rig's ledger.
func (r *rig) sweeper(cfg sweeping.Config) *sweeping.Sweeper {
	cfg.Engine.Report = r.ledger
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	return sweeping.New(r.store.Sweeping(), cfg)
}

// engine returns a processing engine on the rig's store, for the path by, that reports to the
// rig's ledger.
func (r *rig) engine(by string) *processing.Engine {
	return &processing.Engine{Store: r.store.Events, TaskStore: r.store.Tasks, By: by, Report: r.ledger, Logger: testLogger()}
}

// child starts this test binary in role (main_test.go) with env, reporting its settlements to a
// file of its own (REPORTS), and returns the process and the file.
func (r *rig) child(role string, env ...string) (*child.Process, string) {
	r.t.Helper()
	reports := filepath.Join(r.t.TempDir(), fmt.Sprintf("%s-%d.reports", role, len(r.children)))
	p := child.Start(r.t, role, append(env, "REPORTS="+reports)...)
	r.children = append(r.children, reportingChild{proc: p, reports: reports})
	return p, reports
}

// collect reads the reports of the rig's child processes into its ledger, once each. A child must
// be gone: a running one could still report.
func (r *rig) collect() {
	r.t.Helper()
	for _, c := range r.children {
		select {
		case <-c.proc.Exited():
		default:
			r.t.Fatalf("child process %d still runs: its reports are not final", c.proc.Pid())
		}
		require.NoError(r.t, r.ledger.ReadFile(c.reports))
	}
	r.children = nil
}

// checkSettled is checkSettled on the rig's table and ledger, with its children's reports.
func (r *rig) checkSettled(ids []int64, by ...string) (map[string]int, verify.Result) {
	r.t.Helper()
	r.collect()
	return checkSettled(r.t, r.checkStore, r.ledger, ids, by...)
}

// settledOnce is requireSettledOnce on the rig's table and ledger, with its children's reports.
func (r *rig) settledOnce(ids []int64, by ...string) map[string]int {
	r.t.Helper()
	r.collect()
	return requireSettledOnce(r.t, r.checkStore, r.ledger, ids, by...)
}

// run starts the mapping with the rig's processor and stops it when the test ends.
func (r *rig) run(concurrency, batch int) *mapping.Mapping {
	m := mapping.New(r.client, r.rec.wrap(r.proc.Handle), mapping.Config{
		QueueURL: r.q.URL, QueueARN: r.q.ARN, Concurrency: concurrency, BatchSize: batch,
		WaitTime: time.Second, Logger: testLogger(),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	r.t.Cleanup(func() { cancel(); <-done })
	return m
}

func (r *rig) send(bodies ...string) []string {
	r.t.Helper()
	var ids []string
	for _, b := range bodies {
		out, err := r.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(r.q.URL), MessageBody: aws.String(b)})
		require.NoError(r.t, err)
		ids = append(ids, aws.ToString(out.MessageId))
	}
	return ids
}

func (r *rig) pending(n int) []int64 {
	r.t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		id, err := r.store.Events.CreatePending(context.Background())
		require.NoError(r.t, err)
		ids[i] = id
	}
	return ids
}

// drain receives every message visible in a queue (the DLQ) and returns their bodies.
func drain(t *testing.T, client *sqs.Client, url string) []string {
	t.Helper()
	var bodies []string
	for range 100 {
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 60,
		})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			return bodies
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
		}
	}
	return bodies
}

// checkSettled checks the table against the workers' own reports of what they settled
// (internal/verify): the test fails on any violation (an event settled by more than one report, a
// report the table contradicts, a settled event without its value, ...) and unless every named
// event is settled, by one of the paths by when any are given. It returns the named events'
// counts per path and the whole result, whose Unreported settlements (a worker killed, or
// its commit's answer lost, between the commit and its report) the caller bounds.
func checkSettled(t *testing.T, store *wire.Stores, l *verify.Ledger, ids []int64, by ...string) (map[string]int, verify.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	audit, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
	require.NoError(t, err)
	res := verify.Check(audit, l)
	require.Empty(t, res.Violations, "exactly once, by the workers' reports: %s", res)
	byID := make(map[int64]verify.Audit, len(audit))
	for _, e := range audit {
		_, dup := byID[e.ID]
		require.False(t, dup, "id %d is stored twice", e.ID)
		byID[e.ID] = e
	}
	perPath := map[string]int{}
	for _, id := range ids {
		e, ok := byID[id]
		require.True(t, ok, "event %d exists", id)
		require.True(t, e.State.Settled(), "event %d settled, not %s", id, e.State)
		if len(by) > 0 {
			require.Contains(t, by, e.By, "event %d settled by", id)
		}
		perPath[e.By]++
	}
	return perPath, res
}

// requireSettledOnce is checkSettled where no worker died or lost a commit's answer: every
// settlement by a worker is reported by that worker, once.
func requireSettledOnce(t *testing.T, store *wire.Stores, l *verify.Ledger, ids []int64, by ...string) map[string]int {
	t.Helper()
	perPath, res := checkSettled(t, store, l, ids, by...)
	require.Zero(t, res.Unreported, "every settlement reported by the worker that made it: %s", res)
	return perPath
}

// allSettled tells whether every named event is settled (a progress poll; the check is checkSettled).
func allSettled(t *testing.T, store *wire.Stores, ids []int64) bool {
	t.Helper()
	audit, err := mysqltest.AuditEvents(context.Background(), store.DB.Pool())
	require.NoError(t, err)
	settled := make(map[int64]bool, len(audit))
	for _, e := range audit {
		settled[e.ID] = e.State.Settled()
	}
	for _, id := range ids {
		if !settled[id] {
			return false
		}
	}
	return true
}

// valueWork gives plain events the value fn returns, on the one-transaction path, as the product does.
func valueWork(fn func(id int64) string) exactlyonce.Works {
	return exactlyonce.Works{exactlyonce.KindPlain: exactlyonce.ValueWork{New: fn}}
}
