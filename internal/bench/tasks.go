package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// The tasks group: webhooks delivered from POST /events/async with a url (README, "Tasks and
// webhooks") to a local receiver that answers in about 1 ms, through the product's workers on the
// local stack: the processor behind goaws (the local event source mapping) and sweeper agents (the
// local system's, and one more in this process), every one of them with a webhook client that may
// deliver to loopback (WEBHOOK_ALLOW_LOOPBACK).
//
// Tasks are created by concurrent clients through the real API, on loopback: each client owns some
// references and creates their tasks in order (the first task of each of its references, then the
// second of each, ...), one request at a time, so that many references are active at once and each
// reference's tasks are created in order by one client. The receiver reads the task's reference and
// sequence number from the payload, timestamps the first successful delivery of each, and checks
// that no attempt of a reference's task arrives before the task before it was delivered: a run
// that delivers out of order fails its check.
//
// Four kinds of run on one stack, after an uncounted warm-up (the unordered and ordered runs
// alternate for three rounds):
//
//	unordered  20,000 tasks without referenceId: the reference throughput
//	ordered    the same 20,000 tasks over 1,000 references (20 each): tasks/s and create-to-delivered
//	           latency; target >= 0.8x unordered, and >= 1,000 tasks/s (Convoy v26.7.3: 123-147
//	           webhooks/s on a 2-core machine, unordered)
//	failing    the ordered run with 10% of the references answering 503 to the first two attempts of
//	           each of their tasks: the healthy references' p99 within 2x of the ordered run's
//	paced      ordered tasks created at 200/s, well below saturation: p50 create-to-delivered under
//	           100 ms
const tasksGroup = "tasks"

// Knobs of the tasks group. The retry backoff is short so that the failing run ends in seconds:
// each task of a failing reference waits two backoffs (at most 50 ms, then 100 ms: RETRY_BASE=50ms)
// and is then picked up by a sweeper agent, which polls every 100 ms when nothing is due; the
// sweeper's grace (1 s) leaves fresh tasks to the queue path.
const (
	tasksRetryBase     = 50 * time.Millisecond
	tasksRetryMax      = time.Second
	tasksSweepInterval = 100 * time.Millisecond
	tasksSweepGrace    = time.Second
	tasksReceiverDelay = time.Millisecond
	tasksMaxRetries    = 5
	tasksFailAttempts  = 2 // a failing reference answers 503 to this many attempts of each task
)

// taskSpec is one measured run: refs references of perRef tasks each (refs*perRef tasks without
// reference when unordered), created by clients goroutines, at rate tasks/s in all (0: as fast as
// the API answers), with failEvery-th reference failing (0: none).
type taskSpec struct {
	name         string
	refs, perRef int
	clients      int
	ordered      bool
	rate         float64
	failEvery    int
	timeout      time.Duration
}

func (s taskSpec) total() int { return s.refs * s.perRef }

func (s taskSpec) failing(ref int) bool { return s.failEvery > 0 && ref%s.failEvery == s.failEvery-1 }

// taskResult is what one run measured.
type taskResult struct {
	spec      taskSpec
	delivered int
	took      time.Duration // first create sent to last task delivered
	createdIn time.Duration // first create sent to last create answered
	// latencies from the create's answer (202) to the first successful delivery, all tasks and
	// those of the healthy references only, sorted.
	latencies, healthy []time.Duration
	// failingDone is when the last task of a failing reference was delivered, after the start.
	failingDone time.Duration
	check       receiverCheck
}

func (t taskResult) tps() float64 { return float64(t.delivered) / t.took.Seconds() }

// merge adds round o to t: tasks and times summed, latencies pooled.
func (t taskResult) merge(o taskResult) taskResult {
	if t.delivered == 0 {
		return o
	}
	t.delivered += o.delivered
	t.took += o.took
	t.createdIn += o.createdIn
	t.latencies = append(t.latencies, o.latencies...)
	t.healthy = append(t.healthy, o.healthy...)
	slices.Sort(t.latencies)
	slices.Sort(t.healthy)
	t.failingDone = max(t.failingDone, o.failingDone)
	return t
}

// receiverCheck is what the receiver saw of a run beyond its timings.
type receiverCheck struct {
	attempts, failed, duplicates, stale int
	outOfOrder                          int
	firstViolation                      string
}

// taskReceiver is the webhook receiver: an HTTP server on 127.0.0.1 answering every delivery of the
// current round after about tasksReceiverDelay.
type taskReceiver struct {
	srv   *httptest.Server
	delay time.Duration
	mu    sync.Mutex
	round *receiverRound
}

// receiverRound is the receiver's record of one run.
type receiverRound struct {
	tag     int
	spec    taskSpec
	refs    []refRecord
	left    int           // tasks not delivered yet
	done    chan struct{} // closed when left reaches 0
	lastAt  time.Time     // the last first delivery
	check   receiverCheck
	started time.Time
}

// refRecord is one reference's deliveries: next is, for an ordered run, the sequence number of the
// task that may be delivered next (every one before it was delivered).
type refRecord struct {
	next      int
	attempts  []int
	delivered []time.Time
}

// taskPayload is what each task carries: the run, its reference and its place in it.
type taskPayload struct {
	Tag int `json:"t"`
	Ref int `json:"r"`
	Seq int `json:"s"`
}

func newTaskReceiver(delay time.Duration) *taskReceiver {
	tr := &taskReceiver{delay: delay}
	tr.srv = httptest.NewServer(http.HandlerFunc(tr.serve))
	return tr
}

func (tr *taskReceiver) close() { tr.srv.Close() }

// begin starts recording a round.
func (tr *taskReceiver) begin(tag int, spec taskSpec) *receiverRound {
	rr := &receiverRound{tag: tag, spec: spec, refs: make([]refRecord, spec.refs), left: spec.total(),
		done: make(chan struct{}), started: time.Now()}
	for i := range rr.refs {
		rr.refs[i] = refRecord{attempts: make([]int, spec.perRef), delivered: make([]time.Time, spec.perRef)}
	}
	tr.mu.Lock()
	tr.round = rr
	tr.mu.Unlock()
	return rr
}

// serve answers one delivery: 503 to a failing reference's first attempts, 200 otherwise, after
// the receiver's delay. The first 200 of each task is its delivery, timestamped when answered.
func (tr *taskReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var p taskPayload
	if err == nil {
		err = json.Unmarshal(body, &p)
	}
	if err != nil {
		http.Error(w, "bad payload", http.StatusBadRequest)
		return
	}
	tr.mu.Lock()
	rr := tr.round
	status := rr.arrive(p)
	tr.mu.Unlock()
	time.Sleep(tr.delay) // the receiver's work: a receiver that answers in about 1 ms
	if status == http.StatusOK {
		tr.mu.Lock()
		rr.deliver(p, time.Now())
		tr.mu.Unlock()
	}
	w.WriteHeader(status)
}

// arrive records an attempt and decides its answer. Called with the receiver's lock held.
func (rr *receiverRound) arrive(p taskPayload) int {
	if rr == nil || p.Tag != rr.tag || p.Ref < 0 || p.Ref >= len(rr.refs) || p.Seq < 0 || p.Seq >= rr.spec.perRef {
		if rr != nil {
			rr.check.stale++
		}
		return http.StatusOK // another run's task (a late duplicate): acknowledged, not counted
	}
	rr.check.attempts++
	ref := &rr.refs[p.Ref]
	if rr.spec.ordered && p.Seq > ref.next {
		rr.check.outOfOrder++
		if rr.check.firstViolation == "" {
			rr.check.firstViolation = fmt.Sprintf("reference %d: task %d attempted while task %d was not delivered", p.Ref, p.Seq, ref.next)
		}
	}
	ref.attempts[p.Seq]++
	if rr.spec.failing(p.Ref) && ref.attempts[p.Seq] <= tasksFailAttempts {
		rr.check.failed++
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

// deliver records a successful delivery, answered at.
func (rr *receiverRound) deliver(p taskPayload, at time.Time) {
	ref := &rr.refs[p.Ref]
	if !ref.delivered[p.Seq].IsZero() {
		rr.check.duplicates++
		return
	}
	ref.delivered[p.Seq] = at
	if p.Seq == ref.next {
		for ref.next < len(ref.delivered) && !ref.delivered[ref.next].IsZero() {
			ref.next++
		}
	}
	rr.lastAt = at
	rr.left--
	if rr.left == 0 {
		close(rr.done)
	}
}

// progress is the round's count of tasks delivered.
func (tr *taskReceiver) delivered() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.round.spec.total() - tr.round.left
}

func runTasks(ctx context.Context, r *run) error {
	group := tasksGroup
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	deliverer := webhook.New(webhook.Config{Key: key, AllowLoopback: true})
	tasks := &processing.Tasks{Deliverer: deliverer, RetryBase: tasksRetryBase, RetryMax: tasksRetryMax}
	st, err := r.startStack(ctx, "tasks", func(o *local.Options) {
		o.Engine.Tasks = tasks
		o.Webhook = webhook.Policy{AllowLoopback: true} // the API accepts what the deliverer reaches
		o.Sweep.Grace = new(tasksSweepGrace)
		o.SweepInterval = tasksSweepInterval
	})
	if err != nil {
		return err
	}
	defer st.stop()

	// A second sweeper agent in this process, sharing the hash space with the local system's.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	agent, err := wire.Agent(st.store, sweeping.Config{Grace: new(tasksSweepGrace), Logger: log,
		Engine: processing.Engine{Report: st.ledger, Logger: log, Tasks: tasks}},
		agents.Config{Member: agents.MemberConfig{Name: "bench-tasks-agent", Kind: "sweeper", Logger: log},
			PollInterval: tasksSweepInterval, PollJitter: tasksSweepInterval / 2}, exactlyonce.BySweeper)
	if err != nil {
		return err
	}
	actx, stopAgent := context.WithCancel(context.WithoutCancel(ctx))
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		_ = agent.Run(actx)
	}()
	stopSystem := st.stopSystem
	st.stopSystem = func() {
		stopAgent()
		<-agentDone
		stopSystem()
	}
	defer st.stopSystem()

	recv := newTaskReceiver(tasksReceiverDelay)
	defer recv.close()
	meter := newCPUMeter(map[string]int{"bench": os.Getpid(), "goaws": st.goawsPID, "database": databasePID(ctx, st.db)})

	refs, perRef := pick(r, 1000, 10), 20
	clients := pick(r, 64, 8)
	timeout := pick(r, 10*time.Minute, time.Minute)
	paced := taskSpec{name: "paced", refs: pick(r, 200, 4), perRef: perRef, clients: pick(r, 32, 4), ordered: true,
		rate: 200, timeout: timeout}
	specs := []taskSpec{
		{name: "unordered", refs: refs, perRef: perRef, clients: clients, timeout: timeout},
		{name: "ordered", refs: refs, perRef: perRef, clients: clients, ordered: true, timeout: timeout},
		{name: "failing", refs: refs, perRef: perRef, clients: clients, ordered: true, failEvery: 10, timeout: timeout},
		paced,
	}
	tag := 0
	runOne := func(spec taskSpec, label string) (taskResult, error) {
		tag++
		stats0 := st.store.DB.Stats()
		meter.begin()
		res, err := r.runTaskSpec(ctx, st.url, recv, tag, spec)
		used := meter.end()
		if err != nil {
			return res, fmt.Errorf("%s: %w", spec.name, err)
		}
		// Every settlement done before the next run: no open task left.
		if err := r.awaitProcessed(ctx, group, st.db, time.Minute); err != nil {
			return res, fmt.Errorf("%s: %w", spec.name, err)
		}
		s := st.store.DB.Stats()
		r.progress(group, "%s%-9s %6d tasks in %6.2f s: %7.0f tasks/s delivered (created in %.2f s); p50 %s p99 %s; "+
			"%d attempts, %d answered 503, %d duplicates; deadlocks %d, lock waits %d; %s",
			label, spec.name, res.delivered, res.took.Seconds(), res.tps(), res.createdIn.Seconds(),
			percentile(res.latencies, 50).Round(100*time.Microsecond), percentile(res.latencies, 99).Round(100*time.Microsecond),
			res.check.attempts, res.check.failed, res.check.duplicates, s.Deadlocks-stats0.Deadlocks,
			s.LockWaitTimeouts-stats0.LockWaitTimeouts, cpuSummary(used, res.took))
		return res, nil
	}

	warm := taskSpec{name: "warm-up", refs: pick(r, 100, 4), perRef: 10, clients: clients, ordered: true, timeout: timeout}
	r.progress(group, "warm-up: %d ordered tasks, not counted", warm.total())
	if _, err := runOne(warm, "(warm-up) "); err != nil {
		return err
	}
	// The unordered and the ordered runs alternate for several rounds, the first of a round rotating,
	// and each one's rounds are summed: one window of a few seconds each was at the mercy of whatever
	// else the machine ran (ratios from 0.54 to 1.00 in consecutive runs of one round).
	rounds := pick(r, 3, 1)
	results := map[string]taskResult{}
	var sequence []taskSpec
	for round := range rounds {
		pair := []taskSpec{specs[0], specs[1]}
		if round%2 == 1 {
			pair[0], pair[1] = pair[1], pair[0]
		}
		sequence = append(sequence, pair...)
	}
	sequence = append(sequence, specs[2:]...)
	for _, spec := range sequence {
		r.progress(group, "%s: %d tasks over %d references, %d clients%s", spec.name, spec.total(), spec.refs, spec.clients,
			map[bool]string{true: fmt.Sprintf(", paced at %.0f/s", spec.rate), false: ""}[spec.rate > 0])
		res, err := runOne(spec, "")
		if err != nil {
			return err
		}
		results[spec.name] = results[spec.name].merge(res)
		c := res.check
		if spec.ordered {
			r.check(group, spec.name+": every reference's tasks delivered in order", c.outOfOrder == 0,
				fmt.Sprintf("%d attempts before the task ahead was delivered; %s", c.outOfOrder, c.firstViolation))
		}
		r.check(group, spec.name+": every task delivered, none twice, none unknown", res.delivered == spec.total() && c.duplicates == 0 && c.stale == 0,
			fmt.Sprintf("%d of %d delivered, %d duplicates, %d of another run", res.delivered, spec.total(), c.duplicates, c.stale))
	}
	if err := r.verifySettled(ctx, group, st); err != nil {
		return err
	}

	un, or, fa, pa := results["unordered"], results["ordered"], results["failing"], results["paced"]
	knobs := fmt.Sprintf("%d clients on the API; processor (mapping concurrency %d, batch %d) and 2 sweeper agents; receiver answers in %s",
		clients, stackMappingConcurrency, stackMappingBatchSize, tasksReceiverDelay)
	unRow := Row{Group: group, Name: "tasks_unordered_tps", Value: un.tps(), Unit: "tasks/s",
		Note: fmt.Sprintf("%d tasks without referenceId in %d rounds of %d, first create to last delivery; %s", un.delivered, rounds, un.spec.total(), knobs)}
	orRow := Row{Group: group, Name: "tasks_ordered_tps", Value: or.tps(), Unit: "tasks/s", goal: atLeast(1000),
		Note: fmt.Sprintf("%d tasks in %d rounds of %d over %d references, alternating with the unordered rounds; delivered in order per reference (Convoy v26.7.3, unordered: 123-147 webhooks/s on a 2-core machine)",
			or.delivered, rounds, or.spec.total(), or.spec.refs)}
	latRows := func(prefix string, l []time.Duration, p50 *goal) []Row {
		return []Row{
			{Group: group, Name: prefix + "_p50_ms", Value: ms(percentile(l, 50)), Unit: "ms", goal: p50},
			{Group: group, Name: prefix + "_p99_ms", Value: ms(percentile(l, 99)), Unit: "ms"},
		}
	}
	r.add(unRow, orRow, ratio(group, "tasks_ordered_ratio", orRow, unRow, atLeast(0.8), "ordered per reference vs no reference, same tasks, same run"))
	r.add(latRows("tasks_unordered_latency", un.latencies, nil)...)
	r.add(latRows("tasks_ordered_latency", or.latencies, nil)...)

	orP99 := Row{Group: group, Name: "tasks_ordered_latency_p99_ms", Value: ms(percentile(or.latencies, 99)), Unit: "ms"}
	faP99 := Row{Group: group, Name: "tasks_failing_healthy_p99_ms", Value: ms(percentile(fa.healthy, 99)), Unit: "ms",
		Note: fmt.Sprintf("the ordered run with every %dth reference answering 503 to the first %d attempts of each task (RETRY_BASE=%s): "+
			"the other references' create-to-delivered p99; %.0f tasks/s in all, the failing references done %.1f s after the start",
			fa.spec.failEvery, tasksFailAttempts, tasksRetryBase, fa.tps(), fa.failingDone.Seconds())}
	r.add(faP99, ratio(group, "tasks_failing_p99_ratio", faP99, orP99, atMost(2), "healthy references' p99 with 10% failing vs all healthy"))

	r.add(latRows("tasks_paced_latency", pa.latencies, atMost(100))...)
	r.add(Row{Group: group, Name: "tasks_paced_tps", Value: pa.tps(), Unit: "tasks/s",
		Note: fmt.Sprintf("%d ordered tasks over %d references created at %.0f/s (Convoy: p50 about 1 s when paced)",
			pa.delivered, pa.spec.refs, pa.spec.rate)})
	// The event workers (tasks_workers.go), on a database of their own.
	return r.runTaskWorkers(ctx, group)
}

// runTaskSpec creates spec's tasks through the API and waits until the receiver has every one.
func (r *run) runTaskSpec(ctx context.Context, apiURL string, recv *taskReceiver, tag int, spec taskSpec) (taskResult, error) {
	res := taskResult{spec: spec}
	rr := recv.begin(tag, spec)
	created := make([][]time.Time, spec.refs)
	for i := range created {
		created[i] = make([]time.Time, spec.perRef)
	}
	client := httpClient(spec.clients)
	defer client.CloseIdleConnections()
	hook := recv.srv.URL + "/hook"
	var sent atomic.Int64
	var firstErr error
	var errOnce sync.Once
	start := time.Now()
	var wg sync.WaitGroup
	for c := range spec.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Client c owns references c, c+clients, ...: the first task of each, then the second...
			n := 0
			for seq := range spec.perRef {
				for ref := c; ref < spec.refs; ref += spec.clients {
					if spec.rate > 0 { // the k-th task of the run is sent at start + k/rate
						k := seq*spec.refs + ref
						if d := time.Until(start.Add(time.Duration(float64(k) / spec.rate * float64(time.Second)))); d > 0 {
							select {
							case <-ctx.Done():
							case <-time.After(d):
							}
						}
					}
					if ctx.Err() != nil {
						return
					}
					body := map[string]any{"url": hook, "payload": taskPayload{Tag: tag, Ref: ref, Seq: seq}, "maxRetries": tasksMaxRetries}
					if spec.ordered {
						body["referenceId"] = fmt.Sprintf("bench-%d-%d", tag, ref)
					}
					b, _ := json.Marshal(body)
					status, out, err := post(ctx, client, apiURL+"/events/async", b)
					if err == nil && status != http.StatusAccepted {
						err = fmt.Errorf("POST /events/async: HTTP %d: %.200s", status, out)
					}
					if err != nil {
						errOnce.Do(func() { firstErr = err })
						return
					}
					created[ref][seq] = time.Now()
					sent.Add(1)
					n++
				}
			}
		}()
	}
	// Progress while the run goes.
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				r.progress(tasksGroup, "  %s: %d/%d created, %d delivered (%.0f s)", spec.name, sent.Load(), spec.total(),
					recv.delivered(), time.Since(start).Seconds())
			}
		}
	}()
	defer func() { close(stop); pwg.Wait() }()
	wg.Wait()
	res.createdIn = time.Since(start)
	if firstErr != nil {
		return res, firstErr
	}
	select {
	case <-rr.done:
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(spec.timeout):
		return res, fmt.Errorf("%d of %d tasks delivered after %s: %w", recv.delivered(), spec.total(), spec.timeout, errTimeout)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	res.delivered = spec.total() - rr.left
	res.took = rr.lastAt.Sub(start)
	res.check = rr.check
	for ref := range rr.refs {
		for seq, at := range rr.refs[ref].delivered {
			lat := at.Sub(created[ref][seq])
			res.latencies = append(res.latencies, lat)
			if spec.failing(ref) {
				res.failingDone = max(res.failingDone, at.Sub(start))
			} else {
				res.healthy = append(res.healthy, lat)
			}
		}
	}
	slices.Sort(res.latencies)
	slices.Sort(res.healthy)
	return res, nil
}

// post sends a JSON body and reads the whole answer, so that the connection is reused.
func post(ctx context.Context, c *http.Client, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}
