package e2e

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/local"
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

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// localSystem is the local system under test; its processor and its sweeper report every
// settlement to ledger.
type localSystem struct {
	*local.System
	store  *wire.Stores
	ledger *verify.Ledger
	stop   func() // stops the system and waits until it has stopped; once
}

func startSystem(t *testing.T, queues queue.Queues, store *wire.Stores, grace time.Duration) *localSystem {
	t.Helper()
	client := localsqs.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	ledger := verify.NewLedger()
	sys, err := local.Start(ctx, store, client, local.Options{
		HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, Queues: queues, SweepInterval: 100 * time.Millisecond,
		Sweep: sweeping.Config{Grace: &grace, Logger: testLogger()}, Engine: processing.Engine{Report: ledger},
	}, testLogger())
	require.NoError(t, err)
	var once sync.Once
	ls := &localSystem{System: sys, store: store, ledger: ledger, stop: func() {
		once.Do(func() {
			cancel()
			require.NoError(t, sys.Wait())
		})
	}}
	t.Cleanup(ls.stop)
	return ls
}

// requireSettledOnce stops the system, so that no settlement is between its commit and its report,
// and requires every event in the table settled, exactly once by the workers' reports (or born
// settled by the API and reported by nobody). It returns the events per path.
func (ls *localSystem) requireSettledOnce(t *testing.T) map[string]int {
	t.Helper()
	ls.stop()
	audit, err := mysqltest.AuditEvents(context.Background(), ls.store.DB.Pool())
	require.NoError(t, err)
	var ids []int64
	for _, e := range audit {
		ids = append(ids, e.ID)
	}
	return requireSettledOnce(t, ls.store, ls.ledger, ids)
}

// The contract, over HTTP, with the real queue path: concurrent sync and async creates; every id
// unique; every async event gets its value within seconds through the queue, settled once by the
// processor's reports; the count is exact.
func TestLocalSystemEndToEnd(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	// A long grace keeps the sweeper out of it: every async event must come through the queue.
	sys := startSystem(t, q, store, time.Hour)
	tg := Target{APIURL: sys.URL, SQS: client, QueueURL: q.URL, DLQURL: q.DLQURL,
		Settle: 20 * time.Second, Exclusive: true, AsyncBy: []string{"processor"}}
	FlowCreates(t, tg, 8, 10)
	require.Equal(t, map[string]int{exactlyonce.ByAPI: 40, exactlyonce.ByProcessor: 40}, sys.requireSettledOnce(t))
}

// If the queue send fails after the insert commits, the client still has its id and the sweeper
// processes the event.
func TestQueueSendFailureIsCoveredByTheSweeper(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	client := localsqs.Client(t)
	good := localsqs.Queues(t, client, 30, 5)
	broken := good
	broken.URL = good.URL + "-does-not-exist" // every SendMessage fails
	sys := startSystem(t, broken, store, 200*time.Millisecond)

	tg := Target{APIURL: sys.URL}
	status, id := tg.post(t, "/events/async")
	require.Equal(t, http.StatusAccepted, status)
	testutil.Eventually(t, 20*time.Second, "the sweeper processed the event", func() bool {
		return tg.Get(t, id).ProcessedBy == "sweeper"
	})
	require.Equal(t, map[string]int{exactlyonce.BySweeper: 1}, sys.requireSettledOnce(t))
}

// Stopping the local system sends the messages its API still holds for answered events: an event
// answered just before the stop is named by a message, not left to the sweeper.
func TestLocalStopSendsTheMessagesStillHeld(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	client := localsqs.Client(t)
	// Visibility 1 s: a message taken by a receive that the stop cancelled is soon visible again.
	q := localsqs.Queues(t, client, 1, 5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The linger is long, so that only the stop sends the message; the sweeper stays out.
	ledger := verify.NewLedger()
	sys, err := local.Start(ctx, store, client, local.Options{
		HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, Queues: q, AsyncLinger: new(time.Hour), SweepInterval: time.Hour,
		Sweep: sweeping.Config{Grace: new(time.Hour), Logger: testLogger()}, Engine: processing.Engine{Report: ledger},
	}, testLogger())
	require.NoError(t, err)
	tg := Target{APIURL: sys.URL}
	status, id := tg.post(t, "/events/async")
	require.Equal(t, http.StatusAccepted, status)
	require.Nil(t, tg.Get(t, id).Value, "the message lingers: nothing has processed the event yet")
	cancel()
	require.NoError(t, sys.Wait())

	// The processor may have taken the message before the mapping stopped; otherwise it is queued.
	pending, err := store.Events.Get(context.Background(), id)
	require.NoError(t, err)
	if pending.Value != nil {
		require.Equal(t, "processor", pending.ProcessedBy)
		requireSettledOnce(t, store, ledger, []int64{id}, exactlyonce.ByProcessor)
		return
	}
	audit, err := mysqltest.AuditEvents(context.Background(), store.DB.Pool())
	require.NoError(t, err)
	res := verify.Check(audit, ledger)
	require.Empty(t, res.Violations, res.String())
	require.Equal(t, []int64{id}, res.Open, "open, and reported settled by nobody")
	testutil.Eventually(t, 20*time.Second, "a message naming the event is in the queue", func() bool {
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		for _, m := range out.Messages {
			ids, err := queue.Decode(*m.Body)
			require.NoError(t, err)
			if slices.Contains(ids, id) {
				return true
			}
		}
		return false
	})
}
