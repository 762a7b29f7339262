package counters_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mapping"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/counterstore"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// TestMain runs the tests, or, started again by a test in the child role "counter", a counter
// consumer that the test can kill: it polls QUEUE_URL on AWS_ENDPOINT_URL_SQS, applies to DB_DSN,
// publishes to RESULTS_URL, says "applied" after each commit, and after HANG_AFTER commits hangs
// between a commit and its publish (so a kill leaves that batch's notifications unpublished).
func TestMain(m *testing.M) {
	_ = drv.SetLogger(stdlog.New(io.Discard, "", 0))
	if role := os.Getenv(child.RoleEnv); role == "counter" {
		os.Exit(runCounterChild())
	}
	os.Exit(m.Run())
}

func runCounterChild() int {
	store, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	client := localsqs.NewClient(os.Getenv("AWS_ENDPOINT_URL_SQS"))
	var hangAfter int64
	fmt.Sscan(os.Getenv("HANG_AFTER"), &hangAfter)
	var applied atomic.Int64
	c := &counters.Consumer{Store: store.Counters, Publisher: &counters.SQSPublisher{Client: client, QueueURL: os.Getenv("RESULTS_URL")},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Applied: func([]exactlyonce.CounterResult) {
			n := applied.Add(1)
			fmt.Println("applied", n)
			if n == hangAfter {
				fmt.Println("hung")
				select {} // committed, not published: killed here
			}
		}}
	m := mapping.New(client, c.Handle, mapping.Config{QueueURL: os.Getenv("QUEUE_URL"), Concurrency: 4, BatchSize: 10,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	fmt.Println("started")
	_ = m.Run(context.Background())
	return 0
}

// workload is a set of counter messages, each sent 1 to 3 times, with "readed" for half of the
// entities, and what they must count.
type workload struct {
	bodies []string
	sent   map[string]int
	want   map[exactlyonce.CounterKey]int64
}

func newWorkload(entities, users int) workload {
	w := workload{sent: map[string]int{}, want: map[exactlyonce.CounterKey]int64{}}
	for e := range entities {
		m := exactlyonce.CounterMessage{EntityID: fmt.Sprint("e", e), EntityType: "message", UserID: fmt.Sprint("u", e%users), Action: "added"}
		distinct := []exactlyonce.CounterMessage{m}
		if e%2 == 0 {
			m.Action = "readed"
			distinct = append(distinct, m)
		} else {
			w.want[m.Key()]++
		}
		for _, d := range distinct {
			for range 1 + rand.IntN(3) {
				w.bodies = append(w.bodies, body(d))
				w.sent[body(d)]++
			}
		}
	}
	rand.Shuffle(len(w.bodies), func(i, j int) { w.bodies[i], w.bodies[j] = w.bodies[j], w.bodies[i] })
	return w
}

// check verifies, once every message is consumed and the sweep has published what was left: every
// sum is what the messages count, nothing is counted twice (reconciliation), no notification is
// left unpublished, every message sent has a notification, and each count's applied notifications
// carry its versions 1..N once each.
func (w workload) check(t *testing.T, store *wire.Stores, client *sqs.Client, resultsURL string) {
	t.Helper()
	ctx := context.Background()
	var keys []int64
	for k, n := range w.want {
		v, err := store.Counters.CounterSum(ctx, k)
		require.NoError(t, err)
		require.Equal(t, n, v.Sum, "sum of %v", k)
		keys = append(keys, counterstore.UserBucket(k.UserID))
	}
	_, bad, err := store.Counters.ReconcileCounters(ctx, keys, 10_000)
	require.NoError(t, err)
	require.Empty(t, bad)
	var unpublished int
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM counter_notifications WHERE state = 0").Scan(&unpublished))
	require.Zero(t, unpublished)

	var total int
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM counter_notifications").Scan(&total))
	// Notifications are published at least once: a process killed after publishing and before
	// marking them published has them published again by the sweep, and a consumer drops a repeat
	// by its id. So the results queue is drained until every recorded id was heard.
	byID := map[string]exactlyonce.CounterResult{}
	deadline := time.Now().Add(time.Minute)
	for len(byID) < total && time.Now().Before(deadline) {
		for _, n := range drain(t, client, resultsURL, total-len(byID), time.Until(deadline)) {
			var r exactlyonce.CounterResult
			require.NoError(t, json.Unmarshal([]byte(n), &r))
			byID[r.ID] = r
		}
	}
	require.Len(t, byID, total, "every recorded notification was published")
	heard := map[string]int{}
	versions := map[exactlyonce.CounterKey]map[int64]int{}
	for _, r := range byID {
		heard[body(exactlyonce.CounterMessage{EntityID: r.EntityID, EntityType: r.EntityType, UserID: r.UserID, Action: r.Action})]++
		if r.Applied {
			k := exactlyonce.CounterKey{EntityType: r.EntityType, UserID: r.UserID}
			if versions[k] == nil {
				versions[k] = map[int64]int{}
			}
			versions[k][r.Version]++
		}
	}
	for b, n := range w.sent {
		require.GreaterOrEqual(t, heard[b], n, "notifications of %s", b)
	}
	for k, vs := range versions {
		v, err := store.Counters.CounterSum(ctx, k)
		require.NoError(t, err)
		require.Len(t, vs, int(v.Version), "versions of %v", k)
		for ver, n := range vs {
			require.Equal(t, 1, n, "version %d of %v", ver, k)
		}
	}
}

// waitConsumed waits until the queue holds no message, visible or in flight.
func waitConsumed(t *testing.T, client *sqs.Client, url string) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "every message consumed", func() bool {
		v, f, err := queue.Depth(context.Background(), client, url)
		return err == nil && v == 0 && f == 0
	})
}

// A consumer killed with SIGKILL mid-run, with a batch committed and not published: another one
// finishes, the sweeper publishes what the killed one did not, nothing is counted twice, nothing
// is lost, every notification is published.
func TestConsumerKilledMidRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := testdb.DB(t, 8)
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	endpoint := localsqs.Endpoint(t)
	client := localsqs.NewClient(endpoint)
	in := localsqs.Queues(t, client, 2, 100)
	results := localsqs.Queues(t, client, 30, 5)
	w := newWorkload(600, 20)
	sendAll(t, client, in.URL, w.bodies)

	p := child.Start(t, "counter", "DB_DSN="+dsn, "AWS_ENDPOINT_URL_SQS="+endpoint, "QUEUE_URL="+in.URL,
		"RESULTS_URL="+results.URL, "HANG_AFTER=20")
	_, err = p.WaitLine("hung", time.Minute)
	require.NoError(t, err)
	_, err = p.WaitLine("applied 30", time.Minute) // the other pollers carry on: kill mid-run
	require.NoError(t, err)
	p.Kill()
	<-p.Exited()

	pub := &counters.SQSPublisher{Client: client, QueueURL: results.URL}
	c := &counters.Consumer{Store: store.Counters, Publisher: pub}
	m := mapping.New(client, c.Handle, mapping.Config{QueueURL: in.URL, Concurrency: 4, BatchSize: 10})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	waitConsumed(t, client, in.URL)
	stop()
	<-done

	var unpublished int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM counter_notifications WHERE state = 0").Scan(&unpublished))
	require.NotZero(t, unpublished, "the hung batch's notifications were never published")
	t.Logf("unpublished after the run: %d", unpublished)
	res := sweeping.SweepCounters(ctx, store.Counters, sweeping.Counters{Publisher: pub, RepublishAfter: -1}, nil)
	require.Zero(t, res.Errors)
	require.Equal(t, unpublished, res.Republished)
	w.check(t, store, client, results.URL)
}

// The database stopped mid-run and started again: the batches that failed come back and are
// applied once, nothing is lost, every notification is published (by the sweep, for a batch whose
// publish or mark failed).
func TestDatabaseStoppedMidRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := fault.PrivateServer(t)
	require.NoError(t, srv.CreateDatabase(ctx, "counters"))
	db, err := mysql.Open(mysql.ConnConfig{DSN: srv.DSN("counters"), MaxOpenConns: 8})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, mysql.Migrate(ctx, db))
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	client := localsqs.Client(t)
	in := localsqs.Queues(t, client, 1, 1000)
	results := localsqs.Queues(t, client, 30, 5)
	w := newWorkload(600, 20)
	sendAll(t, client, in.URL, w.bodies)

	var batches atomic.Int64
	pub := &counters.SQSPublisher{Client: client, QueueURL: results.URL}
	c := &counters.Consumer{Store: store.Counters, Publisher: pub, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Applied: func([]exactlyonce.CounterResult) { batches.Add(1) }}
	m := mapping.New(client, c.Handle, mapping.Config{QueueURL: in.URL, Concurrency: 4, BatchSize: 10,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	testutil.Eventually(t, time.Minute, "some batches applied", func() bool { return batches.Load() >= 10 })
	require.NoError(t, srv.Stop())
	_, _, _, failedBefore, _ := m.Stats.Snapshot()
	testutil.Eventually(t, time.Minute, "batches fail while the database is down", func() bool {
		_, _, _, failed, _ := m.Stats.Snapshot()
		return failed > failedBefore
	})
	require.NoError(t, srv.Start())
	waitConsumed(t, client, in.URL)
	stop()
	<-done

	res := sweeping.SweepCounters(ctx, store.Counters, sweeping.Counters{Publisher: pub, RepublishAfter: -1}, nil)
	require.Zero(t, res.Errors)
	w.check(t, store, client, results.URL)
}
