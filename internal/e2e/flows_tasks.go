package e2e

// The flows of tasks, counters and agents: like flows.go's, they need nothing but the API's URL,
// the queues and, for tasks, a receiver the target's workers may deliver to. flows_test.go runs them
// against the local system on goaws and MariaDB, ../../localstack/e2e_test.go through LocalStack.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/exactlyonce/exactlyonce"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// Receiver is a webhook receiver for the task flow: it verifies each delivery's signature (Standard
// Webhooks) and answers by path: /ok 204; /fail-once 503 to a task's first delivery (a temporary
// failure: retried), 204 after; /gone-once 410 to a task's first delivery (a permanent failure),
// 204 after (once the task is retried by hand).
type Receiver struct {
	// URL is its base URL, as the target's workers reach it.
	URL string

	wh         *standardwebhooks.Webhook
	mu         sync.Mutex
	deliveries []Delivery
	tries      map[string]int // by webhook-id
}

// Delivery is one delivery a Receiver got.
type Delivery struct {
	WebhookID, Path string
	Seq             int
	Status          int
}

// NewReceiver serves a Receiver on ln (a loopback listener when nil) for the test's duration;
// secret is the signing secret (whsec_… or its base64). url, when not empty, is the URL the
// target's workers reach it at (default: the listener's).
func NewReceiver(t *testing.T, secret string, ln net.Listener, url string) *Receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	r := &Receiver{wh: wh, tries: map[string]int{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	if ln != nil {
		srv.Listener.Close()
		srv.Listener = ln
	}
	srv.Start()
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	if url != "" {
		r.URL = url
	}
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := r.wh.Verify(body, req.Header); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var p struct {
		Seq int `json:"seq"`
	}
	_ = json.Unmarshal(body, &p)
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tries[id]++
	status := http.StatusNoContent
	switch {
	case req.URL.Path == "/fail-once" && r.tries[id] == 1:
		status = http.StatusServiceUnavailable
	case req.URL.Path == "/gone-once" && r.tries[id] == 1:
		status = http.StatusGone
	}
	r.deliveries = append(r.deliveries, Delivery{WebhookID: id, Path: req.URL.Path, Seq: p.Seq, Status: status})
	w.WriteHeader(status)
}

// Deliveries returns the deliveries so far, in the order they came.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.deliveries)
}

// TaskView is a task as GET /events/{id} shows it.
type TaskView struct {
	ID               int64   `json:"id"`
	Kind             string  `json:"kind"`
	State            string  `json:"state"`
	Attempts         int     `json:"attempts"`
	ExceptionMessage *string `json:"exceptionMessage"`
}

func token() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// postJSON posts body (marshalled) to path and decodes the answer into out; it returns the status.
func (tg Target) postJSON(t *testing.T, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	resp, err := tg.client(t).Post(tg.APIURL+path, "application/json", rd)
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil {
		b, _ := io.ReadAll(resp.Body)
		require.NoError(t, json.Unmarshal(b, out), "POST %s: %d %s", path, resp.StatusCode, b)
	}
	return resp.StatusCode
}

func (tg Target) getJSON(t *testing.T, path string, out any) int {
	t.Helper()
	resp, err := tg.client(t).Get(tg.APIURL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.NoError(t, json.Unmarshal(b, out), "GET %s: %d %s", path, resp.StatusCode, b)
	return resp.StatusCode
}

// createTask creates a task and returns its id.
func (tg Target) createTask(t *testing.T, url, ref string, seq, maxRetries int) int64 {
	t.Helper()
	var m struct {
		ID    int64  `json:"id"`
		Error string `json:"error"`
	}
	status := tg.postJSON(t, "/events/async", map[string]any{"url": url, "referenceId": ref,
		"payload": map[string]any{"seq": seq}, "maxRetries": maxRetries}, &m)
	require.Equal(t, http.StatusAccepted, status, m.Error)
	return m.ID
}

// awaitTask waits until the task is in one of states and returns it.
func (tg Target) awaitTask(t *testing.T, id int64, states ...string) TaskView {
	t.Helper()
	deadline := time.Now().Add(tg.settle())
	for {
		var v TaskView
		require.Equal(t, http.StatusOK, tg.getJSON(t, "/events/"+strconv.FormatInt(id, 10), &v))
		if slices.Contains(states, v.State) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %d is %s after %s, want %v", id, v.State, tg.settle(), states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// attemptStatuses returns GET /events/{id}/attempts' statuses, in order.
func (tg Target) attemptStatuses(t *testing.T, id int64) []int {
	t.Helper()
	var v struct {
		Attempts []struct {
			Status *int `json:"status"`
		} `json:"attempts"`
	}
	require.Equal(t, http.StatusOK, tg.getJSON(t, "/events/"+strconv.FormatInt(id, 10)+"/attempts", &v))
	var out []int
	for _, a := range v.Attempts {
		s := 0
		if a.Status != nil {
			s = *a.Status
		}
		out = append(out, s)
	}
	return out
}

// FlowTasks: a reference's tasks are delivered in the order they were created, each completed
// once; a task whose receiver fails once (503) is retried and completed; a task refused for good
// (410) fails at once, and, retried by hand, is delivered with the same webhook-id and completed.
// Needs Receiver.
func FlowTasks(t *testing.T, tg Target) {
	if tg.Receiver == nil {
		t.Skip("no webhook receiver the target's workers may deliver to (Target.Receiver)")
	}
	r := tg.Receiver
	ref := "flow-" + token()
	var ids []int64
	for seq := range 5 {
		ids = append(ids, tg.createTask(t, r.URL+"/ok", ref, seq, 3))
	}
	retried := tg.createTask(t, r.URL+"/fail-once", "flow-"+token(), 0, 3)
	gone := tg.createTask(t, r.URL+"/gone-once", "flow-"+token(), 0, 3)

	for _, id := range ids {
		require.Equal(t, 1, tg.awaitTask(t, id, "completed", "failed").Attempts, "task %d delivered at its first attempt", id)
	}
	var order []int
	seen := map[string]bool{}
	for _, d := range r.Deliveries() {
		if d.Path == "/ok" && slices.Contains(ids, webhookTask(d.WebhookID)) && !seen[d.WebhookID] {
			seen[d.WebhookID] = true
			order = append(order, d.Seq)
		}
	}
	require.Equal(t, []int{0, 1, 2, 3, 4}, order, "the reference's tasks delivered in the order they were created")

	v := tg.awaitTask(t, retried, "completed", "failed")
	require.Equal(t, "completed", v.State, "a temporary failure is retried")
	require.Equal(t, []int{503, 204}, tg.attemptStatuses(t, retried))

	v = tg.awaitTask(t, gone, "completed", "failed")
	require.Equal(t, "failed", v.State, "a 410 fails the task at once")
	require.Equal(t, []int{410}, tg.attemptStatuses(t, gone))
	var again struct {
		State string `json:"state"`
	}
	require.Equal(t, http.StatusOK, tg.postJSON(t, fmt.Sprintf("/events/%d/retry", gone), nil, &again))
	require.Contains(t, []string{"pending", "queued", "processing", "completed"}, again.State)
	require.Equal(t, "completed", tg.awaitTask(t, gone, "completed").State, "delivered again after the retry")
	require.Equal(t, []int{410, 204}, tg.attemptStatuses(t, gone))
	var sameID []string
	for _, d := range r.Deliveries() {
		if webhookTask(d.WebhookID) == gone {
			sameID = append(sameID, d.WebhookID)
		}
	}
	require.Len(t, sameID, 2)
	require.Equal(t, sameID[0], sameID[1], "a retried task keeps its webhook-id")
}

// webhookTask is the task id of a webhook-id ("task_<id>"), or 0.
func webhookTask(webhookID string) int64 {
	id, _ := strconv.ParseInt(strings.TrimPrefix(webhookID, "task_"), 10, 64)
	return id
}

// FlowCounters: counter messages sent to the counter service's queue, a duplicate among them, are
// counted once each, the API reads the sum, and each message gets one notification through the
// service's topic (on CounterResultsURL, a queue subscribed to it). Needs CounterQueueURL and
// CounterResultsURL.
func FlowCounters(t *testing.T, tg Target) {
	if tg.CounterQueueURL == "" || tg.CounterResultsURL == "" {
		t.Skip("no counter queue and notification queue (Target.CounterQueueURL, CounterResultsURL)")
	}
	ctx := context.Background()
	user := "flow" + token()
	var entries []sqstypes.SendMessageBatchRequestEntry
	for i, entity := range []string{"m1", "m2", "m1", "m3"} { // m1 twice: a duplicate
		body := fmt.Sprintf(`{"entityId":%q,"entityType":"message","userId":%q,"action":"added"}`, entity, user)
		entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body)})
	}
	out, err := tg.SQS.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(tg.CounterQueueURL), Entries: entries})
	require.NoError(t, err)
	require.Empty(t, out.Failed)

	deadline := time.Now().Add(tg.settle())
	var sum struct {
		Sum     int64 `json:"sum"`
		Version int64 `json:"version"`
	}
	for {
		require.Equal(t, http.StatusOK, tg.getJSON(t, "/counters/"+user+"/message", &sum))
		if sum.Version >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Equal(t, int64(3), sum.Sum, "three entities counted, the duplicate once")
	require.Equal(t, int64(3), sum.Version)

	notified := map[string]exactlyonce.CounterResult{} // by notification id
	for len(notified) < 4 && time.Now().Before(deadline) {
		got, err := tg.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(tg.CounterResultsURL),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		for _, m := range got.Messages {
			r := counterResult(t, aws.ToString(m.Body))
			if r.UserID != user {
				continue // another run's
			}
			notified[r.ID] = r
			_, _ = tg.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(tg.CounterResultsURL), ReceiptHandle: m.ReceiptHandle})
		}
	}
	var lines []string
	for _, r := range notified {
		lines = append(lines, fmt.Sprintf("%s applied=%t", r.EntityID, r.Applied))
	}
	require.ElementsMatch(t, []string{"m1 applied=true", "m1 applied=false", "m2 applied=true", "m3 applied=true"}, lines,
		"one notification per message, the duplicate's not applied")
}

// counterResult decodes a notification: the result itself (raw delivery), or SNS's envelope.
func counterResult(t *testing.T, body string) exactlyonce.CounterResult {
	t.Helper()
	var env struct {
		Type    string `json:"Type"`
		Message string `json:"Message"`
	}
	if json.Unmarshal([]byte(body), &env) == nil && env.Type == "Notification" {
		body = env.Message
	}
	var r exactlyonce.CounterResult
	require.NoError(t, json.Unmarshal([]byte(body), &r), body)
	return r
}

// AgentView is an agent as GET /agents shows it.
type AgentView struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Sharding string `json:"sharding"`
	State    string `json:"state"`
}

// FlowAgents: an agent with a hash range is registered (the sweeper's invocations, or a standalone
// agent), as GET /agents shows; on a target whose queue has no consumer (AgentsOnly), async events
// are processed by the agents alone, exactly once.
func FlowAgents(t *testing.T, tg Target) {
	deadline := time.Now().Add(tg.settle())
	var ranged []AgentView
	for len(ranged) == 0 {
		var v struct {
			Agents []AgentView `json:"agents"`
		}
		require.Equal(t, http.StatusOK, tg.getJSON(t, "/agents", &v))
		for _, a := range v.Agents {
			if a.Sharding != "none" {
				ranged = append(ranged, a)
			}
		}
		if len(ranged) == 0 {
			require.True(t, time.Now().Before(deadline), "no agent with a hash range registered within %s: %+v", tg.settle(), v.Agents)
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !tg.AgentsOnly {
		return
	}
	var ids []int64
	for range 5 {
		status, id := tg.post(t, "/events/async")
		require.Equal(t, http.StatusAccepted, status)
		ids = append(ids, id)
	}
	tg.awaitProcessed(t, ids, "sweeper", "agent")
}
