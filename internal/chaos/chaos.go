// Package chaos is the chaos run: the whole system on a private MariaDB and a real SQS endpoint,
// driven by concurrent sync and async creates through the API while processor and sweeper
// processes are killed (SIGKILL) and started again at random, the database is restarted (stopped,
// and killed), and poison messages are injected; then an invariant checker verifies that every
// event was processed exactly once and nothing was lost. `make chaos` runs the long form and
// `make chaos-short` (and `make test`, through TestChaosShort) a short one.
package chaos

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// Config shapes a run. Zero values take the defaults shown.
type Config struct {
	// Duration is how long clients create events while things fail. Default 60 s.
	Duration time.Duration
	// Clients is the number of concurrent API clients. Default 8.
	Clients int
	// Processors and Sweepers are the worker processes kept running (and killed). Defaults 2 and 2.
	Processors, Sweepers int
	// KillEvery is the mean pause between two kills of a random worker. Default 1.5 s.
	KillEvery time.Duration
	// DBRestarts is how many times the database is restarted, alternately stopped and killed.
	// Default 2; at least 1.
	DBRestarts int
	// Poison is the number of malformed messages injected into the queue. Default 6.
	Poison int
	// Visibility is the queue's visibility timeout in seconds (default 3); MaxReceive its
	// receive limit before the DLQ (default 10).
	Visibility, MaxReceive int
	// SweepGrace leaves pending events younger than this to the queue. Default 3 s.
	SweepGrace time.Duration
	// Settle bounds the wait, after the clients stop, for every event to be processed and the
	// poison to reach the DLQ. Default 120 s.
	Settle time.Duration
	// SQSEndpoint is the SQS endpoint; empty starts a local goaws (bin/sqslocal).
	SQSEndpoint string
	// Self is the executable started for workers, with child.RoleEnv naming the role (its main
	// must call RunWorker then). Default os.Args[0].
	Self string
	// Log receives progress lines. Default: discarded.
	Log io.Writer
	// Seed makes the schedule of kills reproducible. Default: random.
	Seed uint64
	// BeforeCheck, when set, runs after the system settled and before the checker: the checker's
	// own test uses it to break the invariants on purpose and see each violation reported.
	BeforeCheck func(ctx context.Context, db *sql.DB, client *sqs.Client, q queue.Queues) error
}

func (c *Config) defaults() {
	c.Duration = cmp.Or(c.Duration, 60*time.Second)
	c.Clients = cmp.Or(c.Clients, 8)
	c.Processors = cmp.Or(c.Processors, 2)
	c.Sweepers = cmp.Or(c.Sweepers, 2)
	c.KillEvery = cmp.Or(c.KillEvery, 1500*time.Millisecond)
	c.DBRestarts = max(cmp.Or(c.DBRestarts, 2), 1)
	c.Poison = cmp.Or(c.Poison, 6)
	c.Visibility = cmp.Or(c.Visibility, 3)
	c.MaxReceive = cmp.Or(c.MaxReceive, 10)
	c.SweepGrace = cmp.Or(c.SweepGrace, 3*time.Second)
	c.Settle = cmp.Or(c.Settle, 120*time.Second)
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

	// Creates acknowledged (201 / 202 with an id), and refused (503: the database was restarting).
	SyncCreates, AsyncCreates int
	Refused                   int
	// NoAnswer counts creates that got no HTTP answer at all (none is expected: the API is not killed).
	NoAnswer int
	// OtherStatuses counts any other answer to a create, by status (none is expected).
	OtherStatuses map[int]int
	// Orphans are events stored whose create the client saw fail (a commit whose answer was lost
	// while the database went down): allowed up to Refused, and processed like any other.
	Orphans int

	ProcessorKills, SweeperKills, WorkerStarts int
	DBStops, DBKills                           int
	PoisonInjected, PoisonInDLQ                int

	// Figures of the store's retry helper and the mapping, summed over every process.
	Deadlocks, LockWaitTimeouts, Retries, GaveUp int64
	Received, Deleted, Failed, Extended          int64
	ProcessedByProcessor, ProcessedBySweeper     int

	// What the checker found: DuplicateIDs (ids handed out twice or stored twice), Duplicates
	// (events with an effect other than exactly one), Lost (acknowledged ids not stored, or events
	// never processed).
	DuplicateIDs, Duplicates, Lost int
	CountReported                  int64 // GET /events at the end
	Violations                     []string
}

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
	fmt.Fprintf(&b, "  creates acknowledged   %d (sync %d, async %d); refused (503) while the database was down: %d; no answer: %d; other answers: %v\n",
		r.SyncCreates+r.AsyncCreates, r.SyncCreates, r.AsyncCreates, r.Refused, r.NoAnswer, r.OtherStatuses)
	fmt.Fprintf(&b, "  committed unanswered   %d (stored, processed once; the client saw its create fail)\n", r.Orphans)
	fmt.Fprintf(&b, "  GET /events            %d\n", r.CountReported)
	fmt.Fprintf(&b, "  kills                  %d (processors %d, sweepers %d); worker starts %d\n",
		r.ProcessorKills+r.SweeperKills, r.ProcessorKills, r.SweeperKills, r.WorkerStarts)
	fmt.Fprintf(&b, "  database restarts      %d (stopped %d, killed %d)\n", r.DBStops+r.DBKills, r.DBStops, r.DBKills)
	fmt.Fprintf(&b, "  retries                %d (deadlocks retried %d, lock wait timeouts %d, gave up %d)\n",
		r.Retries, r.Deadlocks, r.LockWaitTimeouts, r.GaveUp)
	fmt.Fprintf(&b, "  queue                  received %d, acknowledged %d, failed %d, visibility extended %d\n",
		r.Received, r.Deleted, r.Failed, r.Extended)
	fmt.Fprintf(&b, "  processed async by     processor %d, sweeper %d\n", r.ProcessedByProcessor, r.ProcessedBySweeper)
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

// worker is one running worker process.
type worker struct {
	role  string
	child *child.Process
}

// lastStats returns the last stats line the worker printed.
func (w *worker) lastStats() WorkerStats {
	out := w.child.Output()
	for i := len(out) - 1; i >= 0; i-- {
		if raw, ok := strings.CutPrefix(out[i], "stats "); ok {
			var s WorkerStats
			if json.Unmarshal([]byte(raw), &s) == nil {
				return s
			}
		}
	}
	return WorkerStats{}
}

type run struct {
	cfg    Config
	rng    *rand.Rand
	rngMu  sync.Mutex
	server *fault.Server
	client *sqs.Client
	q      queue.Queues
	env    []string

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
	r.env = []string{"DB_DSN=" + dsn, "QUEUE_URL=" + r.q.URL, "AWS_ENDPOINT_URL_SQS=" + endpoint,
		fmt.Sprintf("CHAOS_VISIBILITY=%d", cfg.Visibility), "CHAOS_SWEEP_GRACE=" + cfg.SweepGrace.String()}

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
		if err := cfg.BeforeCheck(ctx, db, r.client, r.q); err != nil {
			return nil, err
		}
	}
	r.check(ctx, db, apiURL, collected, settled)
	r.report.Duration = time.Since(started)
	return &r.report, nil
}

func (r *run) startWorker(role string) error {
	c, err := child.StartProcess(r.cfg.Self, nil, append([]string{child.RoleEnv + "=" + role}, r.env...), os.Stderr)
	if err != nil {
		return err
	}
	if _, err := c.WaitLine("started", 30*time.Second); err != nil {
		c.Kill()
		return err
	}
	r.mu.Lock()
	r.workers = append(r.workers, &worker{role: role, child: c})
	r.report.WorkerStarts++
	r.mu.Unlock()
	return nil
}

func (r *run) stopWorkers() {
	r.mu.Lock()
	ws := r.workers
	r.workers = nil
	r.mu.Unlock()
	for _, w := range ws {
		w.child.Kill()
		r.retire(w)
	}
}

func (r *run) retire(w *worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retired.add(w.lastStats())
}

// killLoop SIGKILLs a random worker every KillEvery (jittered) and starts a new one of the same
// role a moment later.
func (r *run) killLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.jitter(r.cfg.KillEvery)):
		}
		r.mu.Lock()
		if len(r.workers) == 0 {
			r.mu.Unlock()
			continue
		}
		i := r.intn(len(r.workers))
		w := r.workers[i]
		r.workers = append(r.workers[:i:i], r.workers[i+1:]...)
		if w.role == RoleProcessor {
			r.report.ProcessorKills++
		} else {
			r.report.SweeperKills++
		}
		r.mu.Unlock()
		w.child.Kill()
		r.retire(w)
		// Back after a pause, as Lambda would start a new execution environment.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(r.intn(800)) * time.Millisecond):
		}
		if err := r.startWorker(w.role); err != nil {
			r.logf("restart %s: %v", w.role, err)
		}
	}
}

// restartLoop restarts the database DBRestarts times, spread over the run, alternately with a
// graceful stop and a kill, each down for 0.5 to 2.5 s.
func (r *run) restartLoop(ctx context.Context) {
	start := time.Now()
	for i := range r.cfg.DBRestarts {
		at := r.cfg.Duration * time.Duration(i+1) / time.Duration(r.cfg.DBRestarts+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(at))):
		}
		r.dbDown.Store(true)
		var err error
		if i%2 == 0 {
			err = r.server.Stop()
			r.mu.Lock()
			r.report.DBStops++
			r.mu.Unlock()
			r.logf("database stopped")
		} else {
			err = r.server.Kill()
			r.mu.Lock()
			r.report.DBKills++
			r.mu.Unlock()
			r.logf("database killed")
		}
		if err != nil {
			r.logf("database stop: %v", err)
		}
		time.Sleep(500*time.Millisecond + time.Duration(r.intn(2000))*time.Millisecond)
		if err := r.server.Start(); err != nil {
			r.logf("database start: %v\n%s", err, r.server.ErrorLog())
		} else {
			r.logf("database back")
		}
		r.dbDown.Store(false)
	}
}

// poisonLoop sends the malformed messages at random moments of the first half of the run.
func (r *run) poisonLoop(ctx context.Context) {
	for i := range r.cfg.Poison {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(r.intn(int(r.cfg.Duration/time.Duration(2*r.cfg.Poison)) + 1))):
		}
		body := poisonBody(i)
		_, err := r.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(r.q.URL), MessageBody: aws.String(body)})
		if err != nil {
			r.logf("inject poison: %v", err)
			continue
		}
		r.mu.Lock()
		r.report.PoisonInjected++
		r.mu.Unlock()
	}
}

// poisonBody returns the i-th malformed message: a mix of corruptions, each unique.
func poisonBody(i int) string {
	kinds := []string{
		`poison %d: not json`,
		`{"id":-%d}`,
		`{"id":"%d"}`,
		`{"id":1,"poison":%d}`,
		`{"id":%d`,
		`{"id":1e%d}`,
	}
	return fmt.Sprintf(kinds[i%len(kinds)], i+1)
}

func (r *run) progressLoop(ctx context.Context, db *sql.DB) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		pending, err := mysql.CountPending(qctx, db)
		cancel()
		if err != nil {
			pending = -1
		}
		r.mu.Lock()
		rep := r.report
		r.mu.Unlock()
		r.logf("t=%s kills=%d db restarts=%d poison=%d pending=%d", time.Since(start).Round(time.Second),
			rep.ProcessorKills+rep.SweeperKills, rep.DBStops+rep.DBKills, rep.PoisonInjected, pending)
	}
}

// created is one create's outcome as the client saw it.
type created struct {
	async  bool
	status int
	id     int64
	err    error
}

// client_ creates events until ctx ends: sync and async at random, as fast as the API answers.
func (r *run) client_(ctx context.Context, apiURL string, out chan<- created) {
	hc := &http.Client{Timeout: 30 * time.Second}
	for ctx.Err() == nil {
		c := created{async: r.intn(2) == 0}
		path := "/events"
		if c.async {
			path = "/events/async"
		}
		// Not ctx: a request started is finished, so that its outcome is known.
		resp, err := hc.Post(apiURL+path, "application/json", nil)
		if err != nil {
			c.err = err
			out <- c
			continue
		}
		c.status = resp.StatusCode
		var body struct {
			ID int64 `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			c.err = err
		}
		resp.Body.Close()
		c.id = body.ID
		out <- c
		if c.status >= 500 {
			time.Sleep(50 * time.Millisecond) // Retry-After says 1 s; a client that retries a little sooner
		}
	}
}

// settle waits until no event is pending and the DLQ holds every injected poison message.
func (r *run) settle(ctx context.Context, db *sql.DB) bool {
	deadline := time.Now().Add(r.cfg.Settle)
	for time.Now().Before(deadline) {
		pending, err := mysql.CountPending(ctx, db)
		if err != nil {
			pending = -1
		}
		main, dlq := r.depth(r.q.URL), r.depth(r.q.DLQURL)
		if pending == 0 && main == 0 && dlq >= r.report.PoisonInjected {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false
}

// depth returns the messages a queue holds, visible and in flight, or -1 if it cannot tell.
func (r *run) depth(url string) int {
	visible, inFlight, err := queue.Depth(context.Background(), r.client, url)
	if err != nil {
		return -1
	}
	return visible + inFlight
}

// check verifies the invariants and fills the report.
func (r *run) check(ctx context.Context, db *sql.DB, apiURL string, collected []created, settled bool) {
	rep := &r.report
	violate := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	if !settled {
		violate("the system did not settle within %s: events still pending or messages still queued", r.cfg.Settle)
	}

	// What the clients were told.
	acked := map[int64]bool{} // id -> async
	for _, c := range collected {
		switch {
		case c.err == nil && (c.status == http.StatusCreated || c.status == http.StatusAccepted) && c.id > 0:
			if _, dup := acked[c.id]; dup {
				rep.DuplicateIDs++
				violate("id %d was handed to two clients", c.id)
			}
			acked[c.id] = c.async
			if c.async {
				rep.AsyncCreates++
			} else {
				rep.SyncCreates++
			}
		case c.err == nil && c.status == http.StatusServiceUnavailable:
			rep.Refused++
		case c.err != nil:
			rep.NoAnswer++
		default:
			rep.OtherStatuses[c.status]++
		}
	}

	// What the database holds.
	type row struct {
		state, count int
		by           string
		hasValue     bool
	}
	stored := map[int64]row{}
	rows, err := db.QueryContext(ctx, "SELECT id, state, process_count, COALESCE(processed_by, ''), value IS NOT NULL FROM events")
	if err != nil {
		violate("read events: %v", err)
		return
	}
	for rows.Next() {
		var id int64
		var e row
		if err := rows.Scan(&id, &e.state, &e.count, &e.by, &e.hasValue); err != nil {
			violate("read events: %v", err)
			break
		}
		if _, dup := stored[id]; dup {
			rep.DuplicateIDs++
			violate("id %d is stored twice", id)
		}
		stored[id] = e
	}
	rows.Close()

	for id, async := range acked {
		e, ok := stored[id]
		if !ok {
			rep.Lost++
			violate("event %d, whose id a client received, does not exist", id)
			continue
		}
		want := []string{exactlyonce.ByAPI}
		if async {
			want = []string{exactlyonce.ByProcessor, exactlyonce.BySweeper}
		}
		if e.by != "" && !contains(want, e.by) {
			violate("event %d (async=%v) processed by %q", id, async, e.by)
		}
	}
	for id, e := range stored {
		if _, ok := acked[id]; !ok {
			rep.Orphans++
		}
		switch {
		case e.state != int(exactlyonce.Processed) || !e.hasValue:
			rep.Lost++
			violate("event %d never processed (state %d)", id, e.state)
		case e.count != 1:
			rep.Duplicates++
			violate("event %d processed %d times (processed_by %q)", id, e.count, e.by)
		}
		switch e.by {
		case exactlyonce.ByProcessor:
			rep.ProcessedByProcessor++
		case exactlyonce.BySweeper:
			rep.ProcessedBySweeper++
		}
	}
	if rep.Orphans > rep.Refused+rep.NoAnswer+others(rep.OtherStatuses) {
		violate("%d events stored that no client was told about, more than the %d creates that failed", rep.Orphans,
			rep.Refused+rep.NoAnswer+others(rep.OtherStatuses))
	}

	// GET /events equals the acknowledged creates (plus the commits whose answer was lost).
	resp, err := http.Get(apiURL + "/events")
	if err != nil {
		violate("GET /events: %v", err)
	} else {
		var body struct {
			Count int64 `json:"count"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		rep.CountReported = body.Count
		if want := int64(len(acked) + rep.Orphans); body.Count != want {
			violate("GET /events says %d; acknowledged creates %d + committed unanswered %d = %d", body.Count, len(acked), rep.Orphans, want)
		}
	}

	// The DLQ holds exactly the poison.
	var dlq []string
	for range 200 {
		out, err := r.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.q.DLQURL), MaxNumberOfMessages: 10, VisibilityTimeout: 120})
		if err != nil {
			violate("read the DLQ: %v", err)
			break
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			dlq = append(dlq, aws.ToString(m.Body))
		}
	}
	rep.PoisonInDLQ = len(dlq)
	var want []string
	for i := range rep.PoisonInjected {
		want = append(want, poisonBody(i))
	}
	sort.Strings(dlq)
	sort.Strings(want)
	if strings.Join(dlq, "\n") != strings.Join(want, "\n") {
		violate("the DLQ holds %q; the run injected %q", dlq, want)
	}

	// Figures from every process.
	r.mu.Lock()
	s := r.retired
	r.mu.Unlock()
	st := r.apiSnapshot
	rep.Deadlocks, rep.LockWaitTimeouts, rep.Retries, rep.GaveUp = s.Deadlocks+st.Deadlocks, s.LockWaitTimeouts+st.LockWaitTimeouts, s.Retries+st.Retries, s.GaveUp+st.GaveUp
	rep.Received, rep.Deleted, rep.Failed, rep.Extended = s.Received, s.Deleted, s.Failed, s.Extended
}

func others(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// settleCounter counts the events a worker settled, as the worker reports them.
type settleCounter struct{ settled atomic.Int64 }

func (c *settleCounter) Claiming(string)               {}
func (c *settleCounter) Settled(_ string, ids []int64) { c.settled.Add(int64(len(ids))) }
