package processing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// orderReceiver is a webhook receiver on loopback that checks, as requests arrive, that no task of
// a reference is attempted before the task before it got a final answer (2xx, or a permanent 4xx),
// and records each reference's first successful deliveries.
type orderReceiver struct {
	t  *testing.T
	mu sync.Mutex
	// answer decides the status of an attempt of (ref, seq): n is the attempt's number for it.
	answer    func(ref string, seq, n int) int
	attempts  map[string]map[int]int // ref -> seq -> attempts seen
	final     map[string]int         // ref -> highest seq answered finally (-1 none)
	delivered map[string][]int       // ref -> seqs in the order of their first success
	early     []string               // violations
	hookIDs   map[string]string      // webhook-id -> ref/seq
}

// orderPayload is a task's payload as createReferenceTasks writes it: its reference and place.
type orderPayload = mysqltest.ReferencePayload

func newOrderReceiver(t *testing.T, answer func(ref string, seq, n int) int) (*orderReceiver, *httptest.Server) {
	r := &orderReceiver{t: t, answer: answer, attempts: map[string]map[int]int{}, final: map[string]int{},
		delivered: map[string][]int{}, hookIDs: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *orderReceiver) serve(w http.ResponseWriter, req *http.Request) {
	var p orderPayload
	if err := json.NewDecoder(req.Body).Decode(&p); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	if r.attempts[p.Ref] == nil {
		r.attempts[p.Ref] = map[int]int{}
		r.final[p.Ref] = -1
	}
	if p.Seq > r.final[p.Ref]+1 {
		r.early = append(r.early, fmt.Sprintf("%s: task %d attempted while task %d had no final answer", p.Ref, p.Seq, r.final[p.Ref]+1))
	}
	id := req.Header.Get("webhook-id")
	if prev, ok := r.hookIDs[id]; ok && prev != fmt.Sprintf("%s/%d", p.Ref, p.Seq) {
		r.early = append(r.early, fmt.Sprintf("webhook-id %s used for %s and %s/%d", id, prev, p.Ref, p.Seq))
	}
	r.hookIDs[id] = fmt.Sprintf("%s/%d", p.Ref, p.Seq)
	r.attempts[p.Ref][p.Seq]++
	status := r.answer(p.Ref, p.Seq, r.attempts[p.Ref][p.Seq])
	if status < 300 || (status >= 400 && status < 500 && status != 408 && status != 429) {
		if p.Seq > r.final[p.Ref] {
			r.final[p.Ref] = p.Seq
		}
		if status < 300 {
			r.delivered[p.Ref] = append(r.delivered[p.Ref], p.Seq)
		}
	}
	r.mu.Unlock()
	w.WriteHeader(status)
}

func taskEngine(store *wire.Stores, by string) *processing.Engine {
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: 5 * time.Second})
	return &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: by, Tasks: &processing.Tasks{Deliverer: client,
		RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond}}
}

// A reference's tasks are delivered in the order they were created, whatever the workers: here
// sweepers and processors race for them, some receivers fail twice with 503, one answers 400 (the
// task fails and lets the next one go), and every reference's first successful deliveries arrive in
// creation order, with no attempt of a task before the one before it settled.
func TestTasksOfAReferenceAreDeliveredInOrderByRacingWorkers(t *testing.T) {
	t.Parallel()
	const refs, perRef = 12, 8
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec, srv := newOrderReceiver(t, func(ref string, seq, n int) int {
		switch {
		case ref == "ref-3" && seq == 2:
			return http.StatusBadRequest // permanent: this task fails, the next goes
		case (ref == "ref-1" || ref == "ref-5") && n <= 2:
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})

	// Each reference's tasks are created one after the other by its own client; the references'
	// clients run at once.
	heads := make(chan int64, refs*perRef)
	var wg sync.WaitGroup
	for r := 0; r < refs; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			ref := fmt.Sprintf("ref-%d", r)
			for k := 0; k < perRef; k++ {
				payload, _ := json.Marshal(orderPayload{Ref: ref, Seq: k})
				got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: srv.URL + "/hook", Payload: payload,
					ReferenceID: ref, MaxRetries: 3}})
				require.NoError(t, err)
				require.Equal(t, k == 0, got[0].Head, "only a reference's first task heads it at creation (%s/%d)", ref, k)
				if got[0].Head {
					heads <- got[0].ID
				}
			}
		}(r)
	}
	wg.Wait()
	close(heads)
	var headIDs []int64
	for id := range heads {
		headIDs = append(headIDs, id)
	}

	// Processors are given the heads (as queue messages would name them), sweepers claim what is due.
	var workers sync.WaitGroup
	done := make(chan struct{})
	for i := 0; i < 3; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			e := taskEngine(store, exactlyonce.BySweeper)
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := e.ProcessDue(ctx, 0, 5); err != nil {
					t.Errorf("sweeper: %v", err)
					return
				}
			}
		}()
	}
	for i := 0; i < 2; i++ {
		workers.Add(1)
		go func(i int) {
			defer workers.Done()
			e := taskEngine(store, exactlyonce.ByProcessor)
			for j := i; j < len(headIDs); j += 2 {
				if _, err := e.ProcessIDs(ctx, []int64{headIDs[j]}); err != nil {
					t.Errorf("processor: %v", err)
				}
			}
		}(i)
	}
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, f := range rec.final {
			n += f + 1
		}
		return n == refs*perRef
	}, time.Minute, 20*time.Millisecond, "every task gets a final answer")
	// Wait for the last settlements, then stop the workers.
	require.Eventually(t, func() bool {
		open, err := store.Events.Outcomes(ctx, headIDs)
		require.NoError(t, err)
		for _, o := range open {
			if o == exactlyonce.OutcomeBusy || o == exactlyonce.OutcomeDeferred {
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond)
	close(done)
	workers.Wait()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Empty(t, rec.early)
	for r := 0; r < refs; r++ {
		ref := fmt.Sprintf("ref-%d", r)
		var want []int
		for k := 0; k < perRef; k++ {
			if !(ref == "ref-3" && k == 2) {
				want = append(want, k)
			}
		}
		require.Equal(t, want, rec.delivered[ref], "first successful deliveries of %s", ref)
	}
	require.Equal(t, 3, rec.attempts["ref-1"][0], "two 503s, then the delivery")
}

// scriptedReceiver answers with fixed statuses (and headers), and counts its connections.
type scriptedReceiver struct {
	mu       sync.Mutex
	requests int
	handle   func(n int, w http.ResponseWriter)
}

func (s *scriptedReceiver) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	s.requests++
	n := s.requests
	s.mu.Unlock()
	s.handle(n, w)
}

func (s *scriptedReceiver) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func oneTask(t *testing.T, store *wire.Stores, url string, maxRetries int) int64 {
	t.Helper()
	got, err := store.Tasks.CreateTasks(context.Background(), []exactlyonce.NewTask{{URL: url, Payload: []byte(`{}`), MaxRetries: maxRetries}})
	require.NoError(t, err)
	return got[0].ID
}

// Temporary failures are retried with backoff until maxRetries retries are spent, then the task
// fails with the last answer; a Retry-After is honoured up to RETRY_MAX; a permanent answer fails
// the task at once; a forbidden address fails it without a connection.
func TestTaskRetriesBackoffAndFailures(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	key := []byte("0123456789abcdef0123456789abcdef")
	engine := func(allowLoopback bool, base, max time.Duration) *processing.Engine {
		return &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Tasks: &processing.Tasks{
			Deliverer: webhook.New(webhook.Config{Key: key, AllowLoopback: allowLoopback, Timeout: 5 * time.Second}),
			RetryBase: base, RetryMax: max}}
	}
	get := func(id int64) exactlyonce.Event {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		return e
	}

	// maxRetries 2, always 500: three attempts, then failed with the last answer.
	always500 := &scriptedReceiver{handle: func(_ int, w http.ResponseWriter) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("boom"))
	}}
	srv500 := httptest.NewServer(always500)
	t.Cleanup(srv500.Close)
	id := oneTask(t, store, srv500.URL, 2)
	e := engine(true, time.Millisecond, 2*time.Millisecond)
	require.Eventually(t, func() bool {
		_, err := e.ProcessIDs(ctx, []int64{id})
		require.NoError(t, err)
		return get(id).State == exactlyonce.Failed
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 3, always500.count(), "the first attempt and maxRetries retries")
	got := get(id)
	require.Equal(t, "HTTP 500: boom", got.LastError)
	require.Equal(t, 3, got.Attempts)
	attempts, err := store.Tasks.Attempts(ctx, id)
	require.NoError(t, err)
	require.Len(t, attempts, 3)

	// The backoff of a first failure lies in (0, RETRY_BASE].
	id = oneTask(t, store, srv500.URL, 5)
	before := time.Now()
	_, err = engine(true, 300*time.Millisecond, time.Hour).ProcessIDs(ctx, []int64{id})
	require.NoError(t, err)
	got = get(id)
	require.Equal(t, exactlyonce.Pending, got.State)
	require.NotNil(t, got.NextAttemptAt)
	wait := got.NextAttemptAt.Sub(before)
	require.Greater(t, wait, time.Duration(0))
	require.LessOrEqual(t, wait, 300*time.Millisecond+time.Since(before), "full jitter under the first bound")

	// Retry-After: 3 s is honoured with a RETRY_MAX of 10 s, and capped by a RETRY_MAX of 1 s.
	retryAfter := &scriptedReceiver{handle: func(_ int, w http.ResponseWriter) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
	}}
	srvRA := httptest.NewServer(retryAfter)
	t.Cleanup(srvRA.Close)
	for _, tc := range []struct {
		max      time.Duration
		min, top time.Duration
	}{{10 * time.Second, 3 * time.Second, 10 * time.Second}, {time.Second, 0, time.Second}} {
		id = oneTask(t, store, srvRA.URL, 5)
		before = time.Now()
		_, err = engine(true, time.Millisecond, tc.max).ProcessIDs(ctx, []int64{id})
		require.NoError(t, err)
		got = get(id)
		wait = got.NextAttemptAt.Sub(before)
		require.GreaterOrEqual(t, wait, tc.min-100*time.Millisecond, "RETRY_MAX %s", tc.max) // the database's clock, to the millisecond
		require.LessOrEqual(t, wait, tc.top+time.Since(before), "RETRY_MAX %s", tc.max)
	}

	// A permanent answer fails the task at once, whatever its retries.
	gone := &scriptedReceiver{handle: func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusGone) }}
	srvGone := httptest.NewServer(gone)
	t.Cleanup(srvGone.Close)
	id = oneTask(t, store, srvGone.URL, 25)
	_, err = engine(true, time.Millisecond, time.Millisecond).ProcessIDs(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Failed, get(id).State)
	require.Equal(t, 1, gone.count())

	// Loopback not allowed: the task fails at once, says why, and the receiver sees no connection.
	refused := &scriptedReceiver{handle: func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }}
	srvRefused := httptest.NewServer(refused)
	t.Cleanup(srvRefused.Close)
	id = oneTask(t, store, srvRefused.URL, 25)
	_, err = engine(false, time.Millisecond, time.Millisecond).ProcessIDs(ctx, []int64{id})
	require.NoError(t, err)
	got = get(id)
	require.Equal(t, exactlyonce.Failed, got.State)
	require.Contains(t, got.LastError, "loopback")
	require.Zero(t, refused.count())
}

// A worker whose deadline leaves no room for a delivery and its settlement does not start one: the
// tasks it claimed are released, pending and due at once, with no attempt counted, for a worker with
// time; the processor acknowledges their messages (deferred), since the database brings them back.
func TestTasksAreReleasedNotStartedPastTheDeadline(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	recv := &scriptedReceiver{handle: func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	id := oneTask(t, store, srv.URL, 3)
	e := taskEngine(store, exactlyonce.ByProcessor)
	// A delivery may take 10 s (12 with the margin); the invocation has 8 left, most of it for a
	// database stalled by a parallel suite (with 3 s, such a stall ended the claim at the deadline).
	e.Tasks.Timeout = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	out, err := e.ProcessIDs(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeDeferred, out[id])
	require.Zero(t, recv.count(), "no delivery started")
	got, err := store.Events.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, got.State)
	require.Zero(t, got.Attempts)

	// A worker with time delivers it at once (the sweeper's grace does not hold a released task back).
	b, err := taskEngine(store, exactlyonce.BySweeper).ProcessDue(context.Background(), time.Hour, 10)
	require.NoError(t, err)
	require.Equal(t, 1, b.Settled)
	require.Equal(t, 1, recv.count())
}

// Each delivery attempt is counted by its outcome and timed, on the Recorder of the worker's
// context: a 503 (failed, retried), then a 200 (delivered).
func TestTaskDeliveryMetrics(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	rec := metrics.NewRecorder(metrics.PartProcessor, true, nil)
	ctx := metrics.With(context.Background(), rec)
	flaky := &scriptedReceiver{handle: func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}}
	srv := httptest.NewServer(flaky)
	t.Cleanup(srv.Close)
	id := oneTask(t, store, srv.URL, 3)
	e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.ByProcessor, Tasks: &processing.Tasks{
		Deliverer: webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: 5 * time.Second}),
		RetryBase: time.Millisecond, RetryMax: 2 * time.Millisecond}}
	require.Eventually(t, func() bool {
		_, err := e.ProcessIDs(ctx, []int64{id})
		require.NoError(t, err)
		got, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		return got.State == exactlyonce.Processed
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 2, flaky.count())

	values := map[string]metrics.Value{}
	for _, v := range rec.Values() {
		values[v.Name] = v
	}
	require.Equal(t, 1.0, values["TaskDeliveryFailed"].Value)
	require.Equal(t, 1.0, values["TaskDelivered"].Value)
	require.Len(t, values["TaskDeliveryLatency"].Values, 2, "each attempt timed")
	require.Equal(t, 1.0, values["EventsProcessed"].Value)
}

// A claim of due events that takes no task leaves the tasks out of the claim itself, so that the
// events behind them are claimed: a sweeper without a webhook secret, and one whose deadline leaves
// less than a delivery's timeout and margin (TimeForTask). Here two due tasks come before a plain
// event in the table and the claim takes two: it takes the plain event, and the tasks stay as they
// were. (Claimed by kind afterwards, as locked and then left, they filled the claim: it took
// nothing, and the plain event waited for a claim with the time for tasks.)
func TestAClaimThatTakesNoTaskTakesTheEventsBehindThem(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	rec, srv := newOrderReceiver(t, func(string, int, int) int { return http.StatusOK })
	var tasks []int64
	for i := range 2 {
		payload, _ := json.Marshal(orderPayload{Ref: fmt.Sprintf("ref-%d", i), Seq: 0})
		got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: srv.URL + "/hook", Payload: payload,
			ReferenceID: fmt.Sprintf("ref-%d", i), MaxRetries: 3}})
		require.NoError(t, err)
		tasks = append(tasks, got[0].ID)
	}
	var plain []int64
	pending := func() {
		id, err := store.Events.CreatePending(ctx)
		require.NoError(t, err)
		plain = append(plain, id)
	}

	// No deliverer: tasks are not this engine's.
	pending()
	bare := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper}
	b, err := bare.ProcessDue(ctx, 0, 2)
	require.NoError(t, err)
	require.Equal(t, processing.Batch{Claimed: 1, Settled: 1}, b, "the engine without a deliverer")

	// A deliverer, but a deadline closer than a delivery's timeout (10 s) and margin.
	pending()
	e := taskEngine(store, exactlyonce.BySweeper)
	require.Equal(t, 12*time.Second, e.TimeForTask(), "webhook.DefaultTimeout and the margin")
	// 8 s: closer than 12, with room for a database stalled by a parallel suite.
	dctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	b, err = e.ProcessDue(dctx, 0, 2)
	cancel()
	require.NoError(t, err)
	require.Equal(t, processing.Batch{Claimed: 1, Settled: 1}, b, "the engine near its deadline")
	for _, id := range plain {
		ev, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Processed, ev.State)
	}
	for _, id := range tasks {
		ev, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Pending, ev.State)
		require.Zero(t, ev.Attempts)
	}
	rec.mu.Lock()
	require.Empty(t, rec.attempts, "no task attempted")
	rec.mu.Unlock()

	// With the time, the tasks are taken and delivered.
	b, err = e.ProcessDue(ctx, 0, 2)
	require.NoError(t, err)
	require.Equal(t, processing.Batch{Claimed: 2, Settled: 2}, b)
}
