package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
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
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/stretchr/testify/require"
)

// Invariant: when the queue cannot be reached after the async insert commits, the client still
// gets its id (202), the event is stored pending, and the sweeper processes it exactly once.
func TestQueueUnreachableAfterTheAsyncInsertCommits(t *testing.T) {
	t.Parallel()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	// Nothing listens on port 1: every SendMessage fails to connect.
	dead := &queue.SQSSender{Client: localsqs.NewClient("http://127.0.0.1:1"), QueueURL: "http://127.0.0.1:1/000000000000/events"}
	srv := httptest.NewServer(&api.Server{Store: store, Queue: dead, Logger: testLogger()})
	t.Cleanup(srv.Close)

	var ids []int64
	for range 3 {
		status, id := Target{APIURL: srv.URL}.post(t, "/events/async")
		require.Equal(t, http.StatusAccepted, status, "the client gets its id although the send failed")
		ids = append(ids, id)
	}
	ctx := context.Background()
	for _, id := range ids {
		e, err := store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Pending, e.State)
	}
	ledger := verify.NewLedger()
	res, err := sweeping.New(store, sweeping.Config{Grace: -1, Logger: testLogger(), Report: ledger}).Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ids), res.Processed)
	requireSettledOnce(t, store, ledger, ids, exactlyonce.BySweeper)
}

// Invariant: an API process killed mid-request leaves no half-written event, and every id a client
// received exists. Creates that were cut off may or may not have committed (the client cannot
// know); those that did are complete events, and the async ones are processed by the sweeper. The
// API processes run no worker: the events they create settled (POST /events) are reported by
// nobody, which the checker requires of them; the sweeper reports what it settles.
// Both ways of answering async requests: after the message is sent (as on Lambda), and on commit
// with the messages lingering in the outbox (as the local runner does), where a kill can lose the
// messages of answered events.
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
	db, dsn := testdb.DB(t, 4)
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	require.NoError(t, err)
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	env := []string{"DB_DSN=" + dsn, "QUEUE_URL=" + q.URL, "AWS_ENDPOINT_URL_SQS=" + localsqs.Endpoint(t),
		"CHILD_LINGER=" + linger.String()}
	startAPI := func() (*child.Process, string) {
		c := child.Start(t, "api", env...)
		line, err := c.WaitLine("listening ", 30*time.Second)
		require.NoError(t, err)
		return c, line[len("listening "):]
	}

	var (
		mu       sync.Mutex
		received = map[int64]string{} // id -> the path that created it
		dups     []int64
		cutOff   atomic.Int64 // requests sent that got no answer (not merely refused)
	)
	httpClient := &http.Client{Timeout: 10 * time.Second}
	hammer := func(url string, stop <-chan struct{}) *sync.WaitGroup {
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

	proc, url := startAPI()
	stop := make(chan struct{})
	wg := hammer(url, stop)
	testutil.Eventually(t, 30*time.Second, "the API answered 150 creates", func() bool { return count() >= 150 })
	proc.Kill() // mid-request: twelve clients are writing as fast as they can
	wg.Wait()
	require.Positive(t, cutOff.Load(), "the kill cut requests off")
	close(stop)

	// A new process takes over; ids stay unique across the two.
	_, url = startAPI()
	before := count()
	stop2 := make(chan struct{})
	wg = hammer(url, stop2)
	testutil.Eventually(t, 30*time.Second, "the new API process answers", func() bool { return count() >= before+50 })
	close(stop2)
	wg.Wait()

	require.Empty(t, dups, "every id unique")
	audit, err := store.AuditEvents(context.Background())
	require.NoError(t, err)
	rows := map[int64]mysql.Audit{}
	orphans := 0
	for _, e := range audit {
		id := e.ID
		_, dup := rows[id]
		require.False(t, dup, "id %d is stored twice", id)
		rows[id] = e
		path, ok := received[id]
		if !ok {
			orphans++ // committed, but its client was cut off before the answer
		}
		switch {
		case e.State == exactlyonce.Processed: // complete, processed at birth
			require.True(t, e.HasValue, "event %d: processed with a value", id)
			require.Equal(t, exactlyonce.ByAPI, e.By)
			require.Empty(t, e.ClaimID, "event %d: born settled, by no claim", id)
			require.True(t, !ok || path == "/events", "event %d created by %s is processed", id, path)
		case e.State == exactlyonce.Pending: // complete, pending
			require.False(t, e.HasValue, "event %d: pending without a value", id)
			require.Empty(t, e.By, "event %d: pending, settled by nobody", id)
			require.Empty(t, e.ClaimID, "event %d: pending, held by no claim", id)
			require.True(t, !ok || path == "/events/async")
		default:
			t.Fatalf("event %d is half-written: %+v", id, e)
		}
	}
	for id := range received {
		_, ok := rows[id]
		require.True(t, ok, "event %d, whose id a client received, exists", id)
	}
	require.LessOrEqual(t, int64(orphans), cutOff.Load(), "every event nobody was told about is explained by a cut-off request")
	t.Logf("received %d ids, %d requests cut off, %d events committed without an answer", len(received), cutOff.Load(), orphans)

	// The pending ones (including any whose message was never sent) are processed once.
	ledger := verify.NewLedger()
	_, err = sweeping.New(store, sweeping.Config{Grace: -1, Logger: testLogger(), Report: ledger}).Sweep(context.Background())
	require.NoError(t, err)
	var all []int64
	for id := range rows {
		all = append(all, id)
	}
	requireSettledOnce(t, store, ledger, all, exactlyonce.ByAPI, exactlyonce.BySweeper)
}
