package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mapping"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/exactlyonce/exactlyonce/internal/wire/delivery"
	drv "github.com/go-sql-driver/mysql"
)

// Process roles: the processes the chaos run starts, kills and starts again.
const (
	RoleProcessor = "processor" // the local event source mapping with the processor's handler
	RoleSweeper   = "sweeper"   // a sweeper agent, as `make run` runs one
	RoleAPI       = "api"       // the API as `make run` serves it: answers async creates on commit, an outbox sends
	RoleContender = "contender" // a foreign transaction holding row locks (contention.go)
	RolePacker    = "packer"    // a sweeper's fold and pack over and over, its packs dawdling
)

// ProcessStats is what a process reports on stdout, as a line "stats {json}", every 200 ms: its
// counters since it started. A killed process's last line is what the run counts for it.
type ProcessStats struct {
	Deadlocks        int64 `json:"deadlocks"`
	LockWaitTimeouts int64 `json:"lockWaitTimeouts"`
	Retries          int64 `json:"retries"`
	GaveUp           int64 `json:"gaveUp"`
	Received         int64 `json:"received"`
	Deleted          int64 `json:"deleted"`
	Failed           int64 `json:"failed"`
	Swept            int64 `json:"swept"`
	Extended         int64 `json:"extended"`
	// The contender's own figures (contention.go).
	Holds              int64 `json:"holds,omitempty"`
	ContenderDeadlocks int64 `json:"contenderDeadlocks,omitempty"`
	ContenderTimeouts  int64 `json:"contenderTimeouts,omitempty"`
}

func (s *ProcessStats) add(o ProcessStats) {
	s.Deadlocks += o.Deadlocks
	s.LockWaitTimeouts += o.LockWaitTimeouts
	s.Retries += o.Retries
	s.GaveUp += o.GaveUp
	s.Received += o.Received
	s.Deleted += o.Deleted
	s.Failed += o.Failed
	s.Swept += o.Swept
	s.Extended += o.Extended
	s.Holds += o.Holds
	s.ContenderDeadlocks += o.ContenderDeadlocks
	s.ContenderTimeouts += o.ContenderTimeouts
}

// RunProcess is a process's main: it runs role until SIGTERM (or until it is killed, which is
// the point). Configuration comes from the environment, the functions' variables read by
// internal/config as the functions read them (DB_DSN, QUEUE_URL, AWS_ENDPOINT_URL_SQS,
// VISIBILITY_HEARTBEAT, VISIBILITY_EXTENSION, SWEEP_GRACE), and the run's own: CHAOS_REPORTS
// (the file its reports of what it settled go to), CHAOS_LEASED (true: plain events take the lease
// path), CHAOS_LEASE (how long) and CHAOS_LOCK_HOLD (how long a contender holds its locks).
//
// It prints "started" once it runs (an API: "started <its base URL>"), then a stats line every
// 200 ms.
func RunProcess(role string) int {
	_ = drv.SetLogger(stdlog.New(io.Discard, "", 0))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	stores, err := child.OpenStores()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}

	reports, err := verify.OpenFileReporter(os.Getenv("CHAOS_REPORTS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer reports.Close()
	leased, _ := strconv.ParseBool(os.Getenv("CHAOS_LEASED"))
	lease, _ := time.ParseDuration(os.Getenv("CHAOS_LEASE"))
	works := exactlyonce.Works{exactlyonce.KindPlain: exactlyonce.ValueWork{Leased: leased}}

	var stats func() ProcessStats
	var run func(context.Context)
	started := "started"
	switch role {
	case RoleAPI:
		// As `make run` builds it (internal/local): async creates answered on commit, their
		// messages sent by the outbox within wire.DefaultAsyncLinger; the default allocator.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		client := localsqs.NewClient(os.Getenv("AWS_ENDPOINT_URL_SQS"))
		handler := wire.API(cfg, stores, &queue.SQSSender{Client: client, QueueURL: cfg.QueueURL},
			api.AsyncGroup{Linger: wire.DefaultAsyncLinger}, log)
		srv := httpserver.New(handler)
		started = "started http://" + ln.Addr().String()
		stats = func() ProcessStats {
			st := stores.DB.Stats()
			return ProcessStats{Deadlocks: st.Deadlocks, LockWaitTimeouts: st.LockWaitTimeouts, Retries: st.Retries, GaveUp: st.GaveUp}
		}
		run = func(ctx context.Context) {
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
				_ = handler.Drain(sctx)
			}()
			_ = srv.Serve(ln)
		}
	case RoleContender:
		hold, err := time.ParseDuration(os.Getenv("CHAOS_LOCK_HOLD"))
		if err != nil {
			hold = 1500 * time.Millisecond
		}
		c := &contender{db: stores.DB.Pool(), hold: hold}
		stats = func() ProcessStats {
			return ProcessStats{Holds: c.holds.Load(), ContenderDeadlocks: c.deadlocks.Load(), ContenderTimeouts: c.timeouts.Load()}
		}
		run = c.run
	case RoleProcessor:
		client := localsqs.NewClient(os.Getenv("AWS_ENDPOINT_URL_SQS"))
		vis := wire.Visibility(cfg, client)
		tasks, err := delivery.Tasks(ctx, cfg, log)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		// Without event workers: the processors are killed over and over, and each one's event workers
		// would hold their references until its agent expired.
		p, err := wire.Processor(stores, processing.Engine{Logger: log, Works: works, Lease: lease, Report: reports, Tasks: tasks}, vis, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		m := mapping.New(client, p.Handle, mapping.Config{QueueURL: cfg.QueueURL, Concurrency: 2, BatchSize: 10,
			WaitTime: time.Second, Timeout: 30 * time.Second, Logger: log})
		stats = func() ProcessStats {
			st := stores.DB.Stats()
			_, received, deleted, failed, _ := m.Stats.Snapshot()
			return ProcessStats{Deadlocks: st.Deadlocks, LockWaitTimeouts: st.LockWaitTimeouts, Retries: st.Retries,
				GaveUp: st.GaveUp, Received: received, Deleted: deleted, Failed: failed, Extended: vis.Extended.Load()}
		}
		run = func(ctx context.Context) { _ = m.Run(ctx) }
	case RoleSweeper:
		// The sweepers are agents, as in `make run` and on AWS: each registers, pulses and claims
		// only its hash range, so killing one leaves its range to the others once its row expires
		// (fast intervals: a pulse every 200 ms, ejected after 1 s), and a database restart makes
		// their pulses fail and their rows expire.
		counting := &settleCounter{Reporter: reports}
		ac := wire.AgentConfigs(cfg, "chaos", log)[0]
		ac.BatchSize, ac.PollInterval, ac.PollJitter = 20, 200*time.Millisecond, 200*time.Millisecond
		ac.Member.PulseInterval, ac.Member.Expiration = 200*time.Millisecond, time.Second
		tasks, err := delivery.Tasks(ctx, cfg, log)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		// And they fold the count between batches, every second, so that the count's folds run
		// under the kills and restarts too (the run checks GET /events against the creates).
		sc := wire.Sweeping(cfg, log)
		sc.MaintainEvery, sc.KeepHistory = time.Second, os.Getenv("CHAOS_KEEP_HISTORY") == "1"
		sc.Engine = processing.Engine{Works: works, Lease: lease, Report: counting, Logger: log, Tasks: tasks}
		a, err := wire.Agent(stores, sc, ac, exactlyonce.BySweeper)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		stats = func() ProcessStats {
			st := stores.DB.Stats()
			return ProcessStats{Deadlocks: st.Deadlocks, LockWaitTimeouts: st.LockWaitTimeouts, Retries: st.Retries,
				GaveUp: st.GaveUp, Swept: counting.settled.Load()}
		}
		run = func(ctx context.Context) { _ = a.Run(ctx) }
	case RolePacker:
		// The fold and the pack of a sweeper's maintenance, over and over, a unit or two at a time
		// (a sweeper's maintenance packs up to ten units a transaction, once a second), their packs
		// dawdling at random between statements (pagestore.WithPackSteps): so that packs of the same
		// units overlap each other's, the sweepers', the folds and the late creates in every way,
		// the interleavings of two packs and a late event, which packs of a few milliseconds rarely meet.
		stats = func() ProcessStats {
			st := stores.DB.Stats()
			return ProcessStats{Deadlocks: st.Deadlocks, LockWaitTimeouts: st.LockWaitTimeouts, Retries: st.Retries, GaveUp: st.GaveUp}
		}
		run = func(ctx context.Context) {
			dawdle := pagestore.WithPackSteps(ctx, func(*sql.Tx, string) {
				if rand.IntN(2) == 0 {
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				}
			})
			for ctx.Err() == nil {
				_, err := stores.Events.FoldSettled(ctx, 1000)
				if err == nil {
					_, _, err = stores.Pages.PackPages(dawdle, 1+rand.IntN(2), time.Second)
				}
				if err != nil {
					time.Sleep(50 * time.Millisecond) // the database is down, or restarting
				}
			}
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown process role %q\n", role)
		return 2
	}

	report := func() {
		b, _ := json.Marshal(stats())
		fmt.Printf("stats %s\n", b)
	}
	fmt.Println(started)
	done := make(chan struct{})
	go func() { run(ctx); close(done) }()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			report()
			return 0
		case <-t.C:
			report()
		}
	}
}

// settleCounter counts the events a process settled, as the process reports them, and passes the
// reports on.
type settleCounter struct {
	processing.Reporter
	settled atomic.Int64
}

func (c *settleCounter) Settled(claim string, ids []int64) {
	c.settled.Add(int64(len(ids)))
	c.Reporter.Settled(claim, ids)
}
