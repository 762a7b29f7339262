package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// testKey signs the tests' deliveries.
var testKey = []byte("exactlyonce-e2e-test-signing-key-0123456789")

// testTasks delivers to loopback receivers with millisecond backoffs.
func testTasks() *processing.Tasks {
	return &processing.Tasks{Deliverer: webhook.New(webhook.Config{Key: testKey, AllowLoopback: true, Timeout: 5 * time.Second}),
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}
}

// orderedReceiver checks, as each delivery arrives, that no task of a reference is attempted before
// the one before it got a final answer (2xx, or a permanent 4xx), and records each reference's
// first successful deliveries in the order they came.
type orderedReceiver struct {
	mu        sync.Mutex
	answer    func(ref, seq, n int) (status int, delay time.Duration)
	attempts  map[[2]int]int
	final     map[int]int // ref -> highest seq with a final answer (-1: none)
	delivered map[int][]int
	ids       map[string][2]int // webhook-id -> ref, seq
	problems  []string
	finals    int
}

type orderedPayload struct{ Ref, Seq int }

func newOrderedReceiver(refs int, answer func(ref, seq, n int) (int, time.Duration)) *orderedReceiver {
	r := &orderedReceiver{answer: answer, attempts: map[[2]int]int{}, final: map[int]int{}, delivered: map[int][]int{},
		ids: map[string][2]int{}}
	for i := 0; i < refs; i++ {
		r.final[i] = -1
	}
	return r
}

func (r *orderedReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var p orderedPayload
	if err := json.NewDecoder(req.Body).Decode(&p); err != nil {
		http.Error(w, "bad payload", http.StatusBadRequest)
		return
	}
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	if p.Seq > r.final[p.Ref]+1 {
		r.problems = append(r.problems, fmt.Sprintf("reference %d: task %d attempted before task %d settled", p.Ref, p.Seq, r.final[p.Ref]+1))
	}
	if prev, ok := r.ids[id]; ok && prev != [2]int{p.Ref, p.Seq} {
		r.problems = append(r.problems, fmt.Sprintf("webhook-id %s names two tasks", id))
	}
	r.ids[id] = [2]int{p.Ref, p.Seq}
	k := [2]int{p.Ref, p.Seq}
	r.attempts[k]++
	status, delay := r.answer(p.Ref, p.Seq, r.attempts[k])
	r.mu.Unlock()
	time.Sleep(delay) // a slow receiver
	r.mu.Lock()
	if status < 300 || status == http.StatusBadRequest {
		if p.Seq > r.final[p.Ref] {
			r.final[p.Ref] = p.Seq
			r.finals++
		}
		if status < 300 {
			r.delivered[p.Ref] = append(r.delivered[p.Ref], p.Seq)
		}
	}
	r.mu.Unlock()
	w.WriteHeader(status)
}

// A reference's tasks are delivered in creation order, whatever delivers them: 50 references x 20
// tasks, created through the API by concurrent clients (one per reference, in order), delivered by
// processors behind the queue and sweepers together. Some receivers fail twice with 503, some
// answer 400 (the task fails and lets the next go), some are slow. For every reference the
// receiver saw the first successful deliveries in creation order and no attempt of a task before
// the one before it settled; every task is settled once, by the workers' own reports.
func TestTasksAreDeliveredInOrderPerReferenceByProcessorsAndSweepers(t *testing.T) {
	t.Parallel()
	const refs, perRef = 50, 20
	r := newRig(t, rigOptions{visibility: 5, maxReceive: 10})
	r.proc.Tasks = testTasks()
	rec := newOrderedReceiver(refs, func(ref, seq, n int) (int, time.Duration) {
		switch {
		case ref%10 == 1 && n <= 2:
			return http.StatusServiceUnavailable, 0
		case ref%10 == 2 && seq%7 == 3:
			return http.StatusBadRequest, 0
		case ref%10 == 3:
			return http.StatusOK, 5 * time.Millisecond
		}
		return http.StatusOK, 0
	})
	recv := httptest.NewServer(rec)
	t.Cleanup(recv.Close)
	srv := httptest.NewServer(&api.Server{Store: r.store, Queue: &queue.SQSSender{Client: r.client, QueueURL: r.q.URL},
		Logger: testLogger(), Webhook: webhook.Policy{AllowLoopback: true}})
	t.Cleanup(srv.Close)
	r.run(4, 10)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	var sweepers sync.WaitGroup
	for i := 0; i < 2; i++ {
		sweepers.Add(1)
		go func() {
			defer sweepers.Done()
			e := r.engine(exactlyonce.BySweeper)
			e.Tasks = testTasks()
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := e.ProcessDue(ctx, 0, 20)
				if err != nil {
					t.Errorf("sweeper: %v", err)
					return
				}
				if b.Claimed == 0 {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	defer func() { close(stop); sweepers.Wait() }()

	ids := make([][]int64, refs)
	var clients sync.WaitGroup
	for ref := 0; ref < refs; ref++ {
		clients.Add(1)
		go func(ref int) {
			defer clients.Done()
			for seq := 0; seq < perRef; seq++ {
				payload, _ := json.Marshal(orderedPayload{Ref: ref, Seq: seq})
				body, _ := json.Marshal(map[string]any{"url": recv.URL + "/hook", "payload": json.RawMessage(payload),
					"referenceId": fmt.Sprintf("customer-%d", ref), "maxRetries": 5})
				resp, err := http.Post(srv.URL+"/events/async", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				var out struct{ ID int64 }
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusAccepted {
					t.Errorf("create: %d %v", resp.StatusCode, err)
					return
				}
				ids[ref] = append(ids[ref], out.ID)
			}
		}(ref)
	}
	clients.Wait()
	var all []int64
	for _, l := range ids {
		all = append(all, l...)
	}
	require.Len(t, all, refs*perRef)
	require.Eventually(t, func() bool { return allSettled(t, r.checkStore, all) }, 2*time.Minute, 50*time.Millisecond,
		"every task settled")

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Empty(t, rec.problems)
	for ref := 0; ref < refs; ref++ {
		var want []int
		for seq := 0; seq < perRef; seq++ {
			if !(ref%10 == 2 && seq%7 == 3) {
				want = append(want, seq)
			}
		}
		require.Equal(t, want, rec.delivered[ref], "reference %d: first successful deliveries in creation order", ref)
	}
	perPath := r.settledOnce(all)
	t.Logf("settled by path: %v", perPath)
	require.Positive(t, perPath[exactlyonce.ByProcessor], "the processors delivered some")
	require.Positive(t, perPath[exactlyonce.BySweeper], "the sweepers delivered some")
}

// A worker killed with SIGKILL between the receiver's 200 and the settlement: the task's lease
// expires, another worker delivers it again with the same webhook-id (so the receiver can drop the
// duplicate), and it completes once. The receiver verifies every delivery's signature with the
// Standard Webhooks library.
func TestTaskDeliveredAgainAfterTheWorkerDiedBeforeSettling(t *testing.T) {
	t.Parallel()
	db, dsn := testdb.DB(t, 4)
	r := newRig(t, rigOptions{db: db})
	var mu sync.Mutex
	var seen []string
	wh, err := standardwebhooks.NewWebhookRaw(testKey)
	require.NoError(t, err)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := wh.Verify(body, req.Header); err != nil {
			t.Errorf("signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		seen = append(seen, req.Header.Get("webhook-id"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(recv.Close)
	created, err := r.store.CreateTasks(context.Background(), []exactlyonce.NewTask{{URL: recv.URL, Payload: json.RawMessage(`{"a":1}`),
		ReferenceID: "kill-me", MaxRetries: 3}})
	require.NoError(t, err)
	id := created[0].ID

	proc, _ := r.child("taskworker", "DB_DSN="+dsn)
	line, err := proc.WaitLine("delivered ", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("delivered %s 200", processing.WebhookID(id)), line)
	proc.Kill()
	<-proc.Exited()
	e, err := r.store.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processing, e.State, "delivered, never settled: the dead worker's lease holds it")

	// Another worker takes it over once the lease (2 s) has expired, and delivers it again.
	e2 := r.engine(exactlyonce.BySweeper)
	e2.Tasks = testTasks()
	require.Eventually(t, func() bool {
		b, err := e2.ProcessDue(context.Background(), 0, 10)
		require.NoError(t, err)
		return b.Settled == 1
	}, 30*time.Second, 50*time.Millisecond)
	mu.Lock()
	require.Equal(t, []string{processing.WebhookID(id), processing.WebhookID(id)}, seen, "delivered twice, with one webhook-id")
	mu.Unlock()
	r.settledOnce([]int64{id}, exactlyonce.BySweeper)
	e, err = r.store.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, e.State)
	require.Equal(t, 1, e.ProcessCount, "completed once")
}
