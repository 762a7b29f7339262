package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Invariant: when the queue cannot be reached after the async insert commits, the client still
// gets its id (202), the event is stored pending, and the sweeper processes it exactly once.
func TestQueueUnreachableAfterTheAsyncInsertCommits(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	// Nothing listens on port 1: every SendMessage fails to connect.
	dead := &queue.SQSSender{Client: localsqs.NewClient("http://127.0.0.1:1"), QueueURL: "http://127.0.0.1:1/000000000000/events"}
	srv := openapitest.NewServer(t, &api.Server{Stores: store.API(), Queue: dead, Logger: testLogger()})
	t.Cleanup(srv.Close)

	var ids []int64
	for range 3 {
		status, id := Target{APIURL: srv.URL}.post(t, "/events/async")
		require.Equal(t, http.StatusAccepted, status, "the client gets its id although the send failed")
		ids = append(ids, id)
	}
	ctx := context.Background()
	for _, id := range ids {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Pending, e.State)
	}
	ledger := verify.NewLedger()
	res, err := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), Logger: testLogger(), Engine: processing.Engine{Report: ledger}}).Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ids), res.Processed)
	requireSettledOnce(t, store, ledger, ids, exactlyonce.BySweeper)
}

// Invariant: an API process killed mid-request leaves no half-written event, and every id a client
// received exists. Creates that were cut off may or may not have committed (the client cannot
// know); those that did are complete events, and the async ones are processed by the sweeper. A
// processor runs throughout, as in the real system, on the queue the API processes send to; the
// API processes run no worker: the events they create settled (POST /events) are reported by
// nobody, which the checker requires of them; the processor and the sweeper report what they settle.
//
// Both ways of answering async requests, each held to the case it names:
//   - answer after send (as on Lambda): the kill loses no message of an answered event: once the
//     queue is drained, every async event a client was answered for is processed by the processor;
//   - answer on commit (as the local runner does, here with a 1 s outbox linger): the outbox sends
//     (events answered before the kill are processed by the processor through their messages, and
//     so are all those the second process answered, since it is not killed), and the kill loses
//     the messages of events answered within the linger before it: they sit pending with the queue
//     drained, until the sweeper, after its grace period, settles them.
func TestAPIKilledMidRequest(t *testing.T) {
	t.Parallel()
	for name, linger := range map[string]time.Duration{"answer after send": 0, "answer on commit": time.Second} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			apiKilledMidRequest(t, linger)
		})
	}
}

func apiKilledMidRequest(t *testing.T, linger time.Duration) {
	ctx := context.Background()
	db, dsn := testdb.DB(t, 8)
	r := newRig(t, rigOptions{visibility: 5, maxReceive: 10, db: db})
	env := []string{"DB_DSN=" + dsn, "QUEUE_URL=" + r.q.URL, "AWS_ENDPOINT_URL_SQS=" + localsqs.Endpoint(t),
		"CHILD_LINGER=" + linger.String()}
	startAPI := func() (*child.Process, string) {
		c := child.Start(t, "api", env...)
		line, err := c.WaitLine("listening ", 30*time.Second)
		require.NoError(t, err)
		return c, line[len("listening "):]
	}
	r.run(2, 10) // the processor, throughout

	var (
		mu       sync.Mutex
		received = map[int64]string{} // id -> the path that created it
		answered = map[int64]int{}    // async id -> the API process (1 or 2) that answered it
		dups     []int64
		cutOff   atomic.Int64 // requests sent that got no answer (not merely refused)
	)
	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: openapitest.Transport(t, nil)}
	hammer := func(process int, url string, stop <-chan struct{}) *sync.WaitGroup {
		var wg sync.WaitGroup
		for c := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					path := "/events"
					if (c+i)%2 == 1 {
						path = "/events/async"
					}
					resp, err := httpClient.Post(url+path, "application/json", nil)
					if err != nil {
						if !errors.Is(err, syscall.ECONNREFUSED) {
							cutOff.Add(1)
						}
						return // this process is gone
					}
					var m map[string]any
					derr := json.NewDecoder(resp.Body).Decode(&m)
					resp.Body.Close()
					if derr != nil {
						cutOff.Add(1)
						return
					}
					if resp.StatusCode/100 != 2 {
						continue
					}
					id := int64(m["id"].(float64))
					mu.Lock()
					if _, ok := received[id]; ok {
						dups = append(dups, id)
					}
					received[id] = path
					if path == "/events/async" {
						answered[id] = process
					}
					mu.Unlock()
				}
			}()
		}
		return &wg
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(received)
	}
	answeredBy := func(process int) []int64 {
		mu.Lock()
		defer mu.Unlock()
		var ids []int64
		for id, p := range answered {
			if p == process {
				ids = append(ids, id)
			}
		}
		return ids
	}
	// states reads every event's row.
	states := func() map[int64]verify.Audit {
		audit, err := mysqltest.AuditEvents(ctx, r.checkStore.DB.Pool())
		require.NoError(t, err)
		rows := make(map[int64]verify.Audit, len(audit))
		for _, e := range audit {
			_, dup := rows[e.ID]
			require.False(t, dup, "id %d is stored twice", e.ID)
			rows[e.ID] = e
		}
		return rows
	}
	// split divides ids into those the processor settled and those still pending.
	split := func(ids []int64) (byProcessor, pending []int64) {
		rows := states()
		for _, id := range ids {
			switch e := rows[id]; {
			case e.State == exactlyonce.Processed && e.By == exactlyonce.ByProcessor:
				byProcessor = append(byProcessor, id)
			case e.State == exactlyonce.Pending:
				pending = append(pending, id)
			default:
				t.Fatalf("answered async event %d: %+v (only the processor runs yet)", id, e)
			}
		}
		return byProcessor, pending
	}

	proc, url := startAPI()
	stop := make(chan struct{})
	wg := hammer(1, url, stop)
	// The kill comes once the system is under way: 150 answers, and async events answered by this
	// process already processed through their messages (with the linger, the outbox has sent).
	testutil.Eventually(t, 30*time.Second, "the API answered 150 creates and the processor processed answered async events", func() bool {
		if count() < 150 {
			return false
		}
		done, _ := split(answeredBy(1))
		return len(done) > 0
	})
	proc.Kill() // mid-request: twelve clients are writing as fast as they can
	wg.Wait()
	require.Positive(t, cutOff.Load(), "the kill cut requests off")
	close(stop)

	// Whatever process 1 sent is processed once the queue is drained; what is still pending then
	// has no message.
	testutil.Eventually(t, 30*time.Second, "the processor drained the queue", func() bool { return queueEmpty(t, r.client, r.q.URL) })
	sent1, lost := split(answeredBy(1))
	t.Logf("process 1 answered %d async events: %d processed through their messages, %d pending with no message",
		len(sent1)+len(lost), len(sent1), len(lost))
	require.NotEmpty(t, sent1, "messages of events answered before the kill were sent and processed")
	if linger > 0 {
		require.NotEmpty(t, lost, "answering on commit, the kill lost the messages of answered events: they are pending, the queue empty")
	} else {
		require.Empty(t, lost, "answering after the send, every answered async event has its message")
	}

	// A new process takes over; ids stay unique across the two. It is not killed: every async
	// event it answers gets its message (with the linger, from its outbox within about a second).
	_, url = startAPI()
	before := count()
	stop2 := make(chan struct{})
	wg = hammer(2, url, stop2)
	testutil.Eventually(t, 30*time.Second, "the new API process answers", func() bool { return count() >= before+50 })
	close(stop2)
	wg.Wait()
	answered2 := answeredBy(2)
	require.NotEmpty(t, answered2)
	testutil.Eventually(t, 30*time.Second, "every async event the live process answered is processed through its message", func() bool {
		_, pending := split(answered2)
		return len(pending) == 0
	})
	require.Empty(t, dups, "every id unique")

	// The sweeper, with its grace period, settles the events left pending: the answered ones whose
	// messages the kill lost, and creates committed without an answer.
	sw := r.sweeper(sweeping.Config{Grace: new(2 * time.Second)})
	rows := states()
	var left []int64
	for id, e := range rows {
		if e.State == exactlyonce.Pending {
			left = append(left, id)
		}
	}
	require.Subset(t, left, lost, "the events whose messages were lost are still pending")
	testutil.Eventually(t, 30*time.Second, "the sweeper settled the events left pending", func() bool {
		_, err := sw.Sweep(ctx)
		require.NoError(t, err)
		return allSettled(t, r.checkStore, left)
	})

	rows = states()
	orphans := 0
	for id, e := range rows {
		path, ok := received[id]
		if !ok {
			orphans++ // committed, but its client was cut off before the answer
		}
		// No half-written row: each is a whole create, settled once by the path its kind allows.
		require.True(t, e.HasValue, "event %d: settled with a value", id)
		switch {
		case e.State == exactlyonce.Processed && e.By == exactlyonce.ByAPI: // processed at birth
			require.Empty(t, e.ClaimID, "event %d: born settled, by no claim", id)
			require.True(t, !ok || path == "/events", "event %d created by %s is processed at birth", id, path)
		case e.State == exactlyonce.Processed && (e.By == exactlyonce.ByProcessor || e.By == exactlyonce.BySweeper):
			require.NotEmpty(t, e.ClaimID, "event %d: settled by a claim", id)
			require.True(t, !ok || path == "/events/async", "event %d created by %s was pending", id, path)
			if e.By == exactlyonce.BySweeper {
				require.Contains(t, left, id, "event %d: swept, so it was left pending", id)
			}
		default:
			t.Fatalf("event %d: %+v", id, e)
		}
	}
	for id := range received {
		_, ok := rows[id]
		require.True(t, ok, "event %d, whose id a client received, exists", id)
	}
	for _, id := range lost {
		require.Equal(t, exactlyonce.BySweeper, rows[id].By, "event %d, whose message was lost, is settled by the sweeper", id)
	}
	require.LessOrEqual(t, int64(orphans), cutOff.Load(), "every event nobody was told about is explained by a cut-off request")
	t.Logf("received %d ids, %d requests cut off, %d events committed without an answer, %d answered events whose message was lost, %d swept",
		len(received), cutOff.Load(), orphans, len(lost), len(left))

	var all []int64
	for id := range rows {
		all = append(all, id)
	}
	r.settledOnce(all, exactlyonce.ByAPI, exactlyonce.ByProcessor, exactlyonce.BySweeper)
	r.rec.requireNoViolations(t)
}
