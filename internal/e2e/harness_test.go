package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/exactlyonce/exactlyonce"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mapping"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// recorder wraps the processor's handler and records every delivery, failure and acknowledgement
// per message, and checks, at the moment of each acknowledgement, that the event it names is
// committed as processed: "nothing acknowledged that was not committed".
type recorder struct {
	check *sql.DB // reads event states, on its own pool

	mu         sync.Mutex
	deliveries map[string]int    // messageId -> times handed to the handler
	failures   map[string]int    // messageId -> times reported failed
	acks       map[string]int    // messageId -> times reported succeeded (the mapping deletes it)
	bodies     map[string]string // messageId -> body
	violations []string          // acknowledgements of events that were not committed as processed
	ackGate    func() bool       // when set and false, any acknowledgement is a violation
}

func newRecorder(check *sql.DB) *recorder {
	return &recorder{check: check, deliveries: map[string]int{}, failures: map[string]int{},
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
// committed as processed exactly once.
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
			var state, count int
			var qerr error
			// The database may be going away or coming back: retry the read, never the verdict.
			for attempt := 0; attempt < 300; attempt++ {
				qerr = r.check.QueryRow("SELECT state, process_count FROM events WHERE id = ?", id).Scan(&state, &count)
				if qerr == nil || qerr == sql.ErrNoRows {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if qerr != nil || state != 10 || count != 1 {
				bad = append(bad, fmt.Sprintf("message %s acknowledged; event %d state=%d count=%d err=%v", m.MessageId, id, state, count, qerr))
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
type rig struct {
	t      *testing.T
	store  *mysql.Store
	db     *sql.DB
	client *sqs.Client
	q      queue.Queues
	proc   *processing.Processor
	rec    *recorder
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
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)
	client := localsqs.Client(t)
	r := &rig{t: t, store: store, db: db, client: client, q: localsqs.Queues(t, client, o.visibility, o.maxReceive),
		rec: newRecorder(check)}
	r.proc = &processing.Processor{Store: store, Logger: testLogger()}
	return r
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
		id, err := r.store.CreatePending(context.Background())
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

// eventRow is one stored event, as the checks see it.
type eventRow struct {
	ID    int64
	State int
	Count int
	By    string
	Value sql.NullString
}

func eventRows(t *testing.T, db *sql.DB) map[int64]eventRow {
	t.Helper()
	rows, err := db.Query("SELECT id, state, process_count, COALESCE(processed_by, ''), value FROM events")
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]eventRow{}
	for rows.Next() {
		var e eventRow
		require.NoError(t, rows.Scan(&e.ID, &e.State, &e.Count, &e.By, &e.Value))
		_, dup := out[e.ID]
		require.False(t, dup, "id %d is stored twice", e.ID)
		out[e.ID] = e
	}
	require.NoError(t, rows.Err())
	return out
}

// requireProcessedOnce asserts that every named event is processed, once, by one of the paths.
func requireProcessedOnce(t *testing.T, db *sql.DB, ids []int64, by ...string) map[string]int {
	t.Helper()
	all := eventRows(t, db)
	perPath := map[string]int{}
	for _, id := range ids {
		e, ok := all[id]
		require.True(t, ok, "event %d exists", id)
		require.Equal(t, 10, e.State, "event %d processed", id)
		require.Equal(t, 1, e.Count, "event %d processed exactly once", id)
		require.True(t, e.Value.Valid, "event %d has its value", id)
		if len(by) > 0 {
			require.Contains(t, by, e.By, "event %d processed by", id)
		}
		perPath[e.By]++
	}
	return perPath
}

func allProcessed(t *testing.T, db *sql.DB, ids []int64) bool {
	all := eventRows(t, db)
	for _, id := range ids {
		if all[id].State != 10 {
			return false
		}
	}
	return true
}

// valueWork gives plain events the value fn returns, on the one-transaction path, as the product does.
func valueWork(fn func(id int64) string) exactlyonce.Works {
	return exactlyonce.Works{exactlyonce.KindPlain: exactlyonce.ValueWork{New: fn}}
}
