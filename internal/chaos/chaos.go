// Package chaos is the chaos run: the whole system on a private MariaDB and a real SQS endpoint,
// driven by concurrent sync and async creates through the API while processor and sweeper
// processes are killed (SIGKILL) and started again at random, the database is restarted (stopped,
// and killed), and poison messages are injected; then an invariant checker verifies that every
// event was processed exactly once and nothing was lost. `make chaos` runs the long form and
// `make chaos-short` (and `make test`, through TestChaosShort) a short one.
//
// One file per job: chaos.go sets the run up and drives it (Run); config.go holds its Config and
// Report; supervise.go starts, kills and accounts for the worker processes, and worker.go is what
// runs inside one; faults.go holds the fault loops (worker kills, database restarts, poison
// messages); client.go is the API clients; progress.go the progress lines and the wait for the
// system to settle; checker.go the invariant checker.
package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// run is one chaos run: what its loops share.
type run struct {
	cfg    Config
	rng    *rand.Rand
	rngMu  sync.Mutex
	server *fault.Server
	client *sqs.Client
	q      queue.Queues
	env    []string
	store  *mysql.Store
	// reports is the directory where each worker process writes its reports of what it settled.
	reports string
	starts  int // workers started so far; every second one takes the lease path

	mu      sync.Mutex
	workers []*worker
	retired WorkerStats // counters of workers that are gone
	report  Report

	dbDown      atomic.Bool
	apiSnapshot mysql.StatsSnapshot // the API store's retry counters at the end
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "chaos: "+format+"\n", args...)
}

func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *run) jitter(mean time.Duration) time.Duration {
	return mean/2 + time.Duration(r.intn(int(mean)+1))
}

// Run runs the chaos and checks the invariants. The error is for a run that could not be set up
// or carried out; violations are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	started := time.Now()
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	r.report.Seed = cfg.Seed
	r.report.OtherStatuses = map[int]int{}

	// The database: a private server, so that it can be restarted without touching anyone else's.
	srv, err := fault.StartServer()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	r.server = srv
	r.logf("private MariaDB on %s (data directory initialised in %s)", srv.Addr(), srv.InitTook.Round(time.Millisecond))
	if err := srv.CreateDatabase(ctx, "events"); err != nil {
		return nil, err
	}
	dsn := srv.DSN("events")
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 16})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := mysql.Migrate(ctx, db); err != nil {
		return nil, err
	}
	store, err := mysql.NewStore(db, mysql.StoreConfig{})
	if err != nil {
		return nil, err
	}
	r.store = store
	if r.reports, err = os.MkdirTemp("", "chaos-reports-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(r.reports)

	endpoint := cfg.SQSEndpoint
	if endpoint == "" {
		goaws, err := localsqs.Start("") // dies with this process
		if err != nil {
			return nil, err
		}
		endpoint = goaws.URL
	}
	r.client = localsqs.NewClient(endpoint)
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	r.q, err = queue.Ensure(qctx, r.client, queue.QueueSpec{Name: fmt.Sprintf("chaos-%d", time.Now().UnixNano()),
		VisibilityTimeout: cfg.Visibility, MaxReceiveCount: cfg.MaxReceive})
	cancel()
	if err != nil {
		return nil, err
	}
	// The workers read the variables the functions read (internal/config): the processor extends
	// visibility every half visibility timeout, by one timeout.
	visibility := time.Duration(cfg.Visibility) * time.Second
	r.env = []string{"DB_DSN=" + dsn, "QUEUE_URL=" + r.q.URL, "AWS_ENDPOINT_URL_SQS=" + endpoint,
		"VISIBILITY_HEARTBEAT=" + (visibility / 2).String(), "VISIBILITY_EXTENSION=" + visibility.String(),
		"SWEEP_GRACE=" + cfg.SweepGrace.String(), "CHAOS_LEASE=" + cfg.Lease.String()}

	// The API, in this process: it is not killed (that is another test's scenario), the database
	// and the queue under it are.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	httpSrv := &http.Server{Handler: &api.Server{Store: store, Queue: &queue.SQSSender{Client: r.client, QueueURL: r.q.URL}, Logger: quiet},
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = httpSrv.Serve(ln) }()
	defer httpSrv.Close()
	apiURL := "http://" + ln.Addr().String()

	for range cfg.Processors {
		if err := r.startWorker(RoleProcessor); err != nil {
			return nil, err
		}
	}
	for range cfg.Sweepers {
		if err := r.startWorker(RoleSweeper); err != nil {
			return nil, err
		}
	}
	defer r.stopWorkers()
	r.logf("%d processors, %d sweepers, %d clients for %s; queue %s", cfg.Processors, cfg.Sweepers, cfg.Clients, cfg.Duration, r.q.URL)

	// The chaos.
	runCtx, stopChaos := context.WithTimeout(ctx, cfg.Duration)
	defer stopChaos()
	var wg sync.WaitGroup
	results := make(chan created, 1024)
	for range cfg.Clients {
		wg.Add(1)
		go func() { defer wg.Done(); r.client_(runCtx, apiURL, results) }()
	}
	var collected []created
	collectDone := make(chan struct{})
	go func() {
		for c := range results {
			collected = append(collected, c)
		}
		close(collectDone)
	}()
	wg.Add(4)
	go func() { defer wg.Done(); r.killLoop(runCtx) }()
	go func() { defer wg.Done(); r.restartLoop(runCtx) }()
	go func() { defer wg.Done(); r.poisonLoop(runCtx) }()
	go func() { defer wg.Done(); r.progressLoop(runCtx, db) }()
	<-runCtx.Done()
	wg.Wait()
	close(results)
	<-collectDone
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Settle: every worker running, the database up; wait until nothing is pending and the poison
	// is in the DLQ.
	if !r.server.Running() {
		if err := r.server.Start(); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	for _, w := range r.workers {
		select {
		case <-w.child.Exited():
			r.mu.Unlock()
			return nil, fmt.Errorf("a %s worker exited on its own: %q", w.role, w.child.Output())
		default:
		}
	}
	r.mu.Unlock()
	r.logf("creates done (%d answers); settling", len(collected))
	settled := r.settle(ctx, db)
	r.stopWorkers()
	r.apiSnapshot = store.Stats()
	if cfg.BeforeCheck != nil {
		if err := cfg.BeforeCheck(ctx, db, r.client, r.q, r.reports); err != nil {
			return nil, err
		}
	}
	r.check(ctx, apiURL, collected, settled)
	r.report.Duration = time.Since(started)
	return &r.report, nil
}
