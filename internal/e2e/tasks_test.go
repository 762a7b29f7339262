package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
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
	r.proc.Engine.Tasks = testTasks()
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
	srv := openapitest.NewServer(t, &api.Server{Stores: r.store.API(), Queue: &queue.SQSSender{Client: r.client, QueueURL: r.q.URL},
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
func TestTaskDeliveredAgainAfterItsProcessDiedBeforeSettling(t *testing.T) {
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
	created, err := r.store.Tasks.CreateTasks(context.Background(), []exactlyonce.NewTask{{URL: recv.URL, Payload: json.RawMessage(`{"a":1}`),
		ReferenceID: "kill-me", MaxRetries: 3}})
	require.NoError(t, err)
	id := created[0].ID

	proc, _ := r.child("taskworker", "DB_DSN="+dsn)
	line, err := proc.WaitLine("delivered ", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("delivered %s 200", processing.WebhookID(id)), line)
	proc.Kill()
	<-proc.Exited()
	e, err := r.store.Events.Get(context.Background(), id)
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
	e, err = r.store.Events.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, e.State)
	require.Equal(t, 1, e.ProcessCount, "completed once")
}

// With WEBHOOK_ALLOW_PRIVATE (and WEBHOOK_ALLOW_LOOPBACK) on, tasks to names that resolve to a cloud
// metadata endpoint, in its IPv6, NAT64, 6to4 and other clouds' forms, are created (a name is checked
// where it is dialled), sent through the queue, and fail at their first attempt: the deliverer
// refuses each socket before it connects, so no packet leaves for the endpoint, and a refusal is
// final (no retry). A task to a loopback receiver through the same resolver, the same settings and
// the same path is delivered: the refusals are the rule's.
func TestTasksToMetadataEndpointsAreRefusedWithPrivateAddressesAllowed(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{visibility: 5, maxReceive: 10})
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	addrs := []string{"fd00:ec2::254", "169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::", "::a9fe:a9fe",
		"fd20:ce::254", "100.100.100.200", "192.0.0.192", "fe80::a9fe:a9fe"}
	answers := map[string][]string{"receiver.test": {"127.0.0.1"}}
	for i, a := range addrs {
		answers[fmt.Sprintf("metadata-%d.test", i)] = []string{a}
	}
	dns := testutil.NewDNS(answers)
	settings := webhook.Config{Key: testKey, AllowPrivate: true, AllowLoopback: true, Resolver: dns.Resolver(), Timeout: 5 * time.Second}
	r.proc.Engine.Tasks = &processing.Tasks{Deliverer: webhook.New(settings), RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}
	srv := openapitest.NewServer(t, &api.Server{Stores: r.store.API(), Queue: &queue.SQSSender{Client: r.client, QueueURL: r.q.URL},
		Logger: testLogger(), Webhook: settings.Policy()})
	t.Cleanup(srv.Close)
	r.run(2, 10)

	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		require.Equal(t, want, resp.StatusCode, "%s %s: %v", method, path, out)
		return out
	}
	var ids []int64
	for i := range addrs {
		out := call("POST", "/events/async", fmt.Sprintf(`{"url": "http://metadata-%d.test/latest/meta-data/iam/", "maxRetries": 3}`, i),
			http.StatusAccepted)
		ids = append(ids, int64(out["id"].(float64)))
	}
	out := call("POST", "/events/async", `{"url": "http://receiver.test:`+strings.TrimPrefix(recv.URL, "http://127.0.0.1:")+`/hook"}`,
		http.StatusAccepted)
	control := int64(out["id"].(float64))
	all := append(append([]int64(nil), ids...), control)
	attemptsOf := func(id int64) []any {
		return call("GET", fmt.Sprintf("/events/%d/attempts", id), "", http.StatusOK)["attempts"].([]any)
	}
	// Each task's first attempt: a refusal, made on the address its name resolved to, which it says
	// the kind of, not the address (the resolver's answer: internal on AWS).
	for i, id := range ids {
		name, dialled := fmt.Sprintf("metadata-%d.test", i), netip.MustParseAddr(addrs[i]).Unmap().String()
		require.Eventually(t, func() bool { return len(attemptsOf(id)) > 0 }, time.Minute, 20*time.Millisecond, "%s attempted", name)
		first := attemptsOf(id)[0].(map[string]any)
		msg, _ := first["error"].(string)
		require.True(t, strings.HasPrefix(msg, "refused: "+name+" resolves to "), "%s: the first attempt: %q", name, msg)
		require.NotContains(t, msg, name+" is "+dialled, "%s: the refusal names the address", name)
		require.NotContains(t, msg, "WEBHOOK_ALLOW", "no setting allows it")
		require.Nil(t, first["status"], "%s: no answer, no connection", name)
		require.Contains(t, dns.Names(), name+".", "%s was resolved: the refusal was the dial's", name)
	}
	// A refusal is final: the task failed at that attempt, with no retry.
	require.Eventually(t, func() bool { return allSettled(t, r.checkStore, all) }, time.Minute, 20*time.Millisecond, "every task settled")
	for i, id := range ids {
		task := call("GET", fmt.Sprintf("/events/%d", id), "", http.StatusOK)
		require.Equal(t, "failed", task["state"], "metadata-%d.test", i)
		require.Len(t, attemptsOf(id), 1, "metadata-%d.test: a refusal is final", i)
	}
	require.Equal(t, "completed", call("GET", fmt.Sprintf("/events/%d", control), "", http.StatusOK)["state"])
	require.EqualValues(t, 1, hits.Load(), "the control task reached its receiver")
	r.settledOnce(all, exactlyonce.ByProcessor)
}
