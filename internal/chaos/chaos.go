// Package chaos is the chaos run: the whole system on a private MariaDB and a real SQS endpoint,
// driven by concurrent sync and async creates through API processes built as `make run` builds its
// API (async creates answered on commit, messages sent by an outbox) and by late creates of ids
// taken long before (late.go), while the API, processor, sweeper and packer processes are killed
// (SIGKILL) and started again at random, a contender process holds row
// locks past the lock wait timeout and provokes deadlocks, the database is restarted (stopped, and
// killed), and poison messages are injected; then an invariant checker verifies that every event
// was processed exactly once and nothing was lost. `make chaos` runs the long form and `make
// chaos-short` (which `make test` runs) a short one.
//
// One file per job: chaos.go sets the run up and drives it (Run); config.go holds its Config and
// Report; supervise.go starts, kills and accounts for the processes, and process.go is what
// runs inside one; contention.go is the contender; faults.go holds the fault loops (process kills,
// database restarts, poison messages); client.go is the API clients; late.go the late creates; progress.go the progress
// lines and the wait for the system to settle; checker.go the invariant checker.
package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
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
	store  *wire.Stores
	// reports is the directory where each process writes its reports of what it settled.
	reports string
	starts  map[string]int // processes started so far, by role; every second one takes the lease path

	mu      sync.Mutex
	procs   []*proc
	retired map[string]*ProcessStats // counters of processes that are gone, by role
	// apiStarted is closed, and replaced, whenever an API process starts: clients that found none
	// live wait on it.
	apiStarted chan struct{}
	report     Report

	dbDown atomic.Bool
	// tasks is the run's webhook receiver (tasks.go); nil when the run creates no tasks.
	tasks *taskReceiver
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
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), starts: map[string]int{},
		retired: map[string]*ProcessStats{}, apiStarted: make(chan struct{})}
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
	// Every session of the run, in every process, waits at most LockWaitTimeout for a row lock.
	dsnCfg, err := drv.ParseDSN(srv.DSN("events"))
	if err != nil {
		return nil, err
	}
	if dsnCfg.Params == nil {
		dsnCfg.Params = map[string]string{}
	}
	dsnCfg.Params["innodb_lock_wait_timeout"] = strconv.Itoa(cfg.LockWaitTimeout)
	dsn := dsnCfg.FormatDSN()
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 16})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := mysql.Migrate(ctx, db); err != nil {
		return nil, err
	}
	store, err := wire.StoresOn(db, mysql.Config{})
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
	// The processes read the variables the functions read (internal/config): the processor extends
	// visibility every half visibility timeout, by one timeout.
	visibility := time.Duration(cfg.Visibility) * time.Second
	r.env = []string{"DB_DSN=" + dsn, "QUEUE_URL=" + r.q.URL, "AWS_ENDPOINT_URL_SQS=" + endpoint,
		"VISIBILITY_HEARTBEAT=" + (visibility / 2).String(), "VISIBILITY_EXTENSION=" + visibility.String(),
		"SWEEP_GRACE=" + cfg.SweepGrace.String(), "CHAOS_LEASE=" + cfg.Lease.String(),
		"CHAOS_LOCK_HOLD=" + (time.Duration(cfg.LockWaitTimeout) * 3 * time.Second / 2).String()}
	if cfg.KeepHistory {
		r.env = append(r.env, "CHAOS_KEEP_HISTORY=1")
	}

	// The webhook receiver of the tasks, in this process, which no fault touches.
	if cfg.TaskEvery > 0 {
		if r.tasks, err = startTaskReceiver(); err != nil {
			return nil, err
		}
		defer r.tasks.close()
		r.env = append(r.env, "WEBHOOK_SECRET="+taskSecret, "WEBHOOK_ALLOW_LOOPBACK=true", "RETRY_BASE=20ms", "RETRY_MAX=500ms")
	}

	// The processes, each one the run kills and starts again: the APIs too.
	defer r.stopProcesses()
	for role, n := range map[string]int{RoleAPI: cfg.APIs, RoleProcessor: cfg.Processors, RoleSweeper: cfg.Sweepers,
		RolePacker: cfg.Packers, RoleContender: cfg.Contenders} {
		for range n {
			if err := r.startProcess(role); err != nil {
				return nil, fmt.Errorf("start a %s: %w", role, err)
			}
		}
	}
	r.logf("%d APIs, %d processors, %d sweepers, %d packers, %d contenders (locks held %s, lock wait timeout %d s), %d clients for %s; queue %s",
		cfg.APIs, cfg.Processors, cfg.Sweepers, cfg.Packers, cfg.Contenders, time.Duration(cfg.LockWaitTimeout)*3*time.Second/2, cfg.LockWaitTimeout,
		cfg.Clients, cfg.Duration, r.q.URL)

	// The chaos.
	runCtx, stopChaos := context.WithTimeout(ctx, cfg.Duration)
	defer stopChaos()
	var wg sync.WaitGroup
	results := make(chan created, 1024)
	for i := range cfg.Clients {
		wg.Add(1)
		go func() { defer wg.Done(); r.client_(runCtx, i, results) }()
	}
	var collected []created
	collectDone := make(chan struct{})
	go func() {
		for c := range results {
			collected = append(collected, c)
		}
		close(collectDone)
	}()
	if cfg.LateEvery > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.lateLoop(runCtx, results) }()
	}
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

	// Settle: every process running but the contenders, the database up; wait until nothing is
	// pending and the poison is in the DLQ.
	r.stopProcesses(RoleContender)
	if !r.server.Running() {
		if err := r.server.Start(); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	for _, w := range r.procs {
		select {
		case <-w.child.Exited():
			r.mu.Unlock()
			return nil, fmt.Errorf("a %s process exited on its own: %q", w.role, w.child.Output())
		default:
		}
	}
	r.mu.Unlock()
	// The keyed creates the end of the run cut off, sent again with their keys, as their clients
	// would: every process is up now.
	r.finishKeyed(ctx, collected)
	r.logf("creates done (%d answers); settling", len(collected))
	settled := r.settle(ctx, db)
	// The check reads GET /events through an API, so the APIs stop last.
	r.stopProcesses(RoleProcessor, RoleSweeper, RolePacker)
	if cfg.BeforeCheck != nil {
		if err := cfg.BeforeCheck(ctx, db, r.client, r.q, r.reports); err != nil {
			return nil, err
		}
	}
	r.check(ctx, collected, settled)
	r.stopProcesses()
	r.figures()
	r.report.Duration = time.Since(started)
	return &r.report, nil
}
