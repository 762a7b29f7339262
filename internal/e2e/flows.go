// Package e2e tests the system end to end. Its test files drive the events/ samples through the
// handlers, the real bootstraps through the Lambda Runtime API, every failure scenario of the
// design, and the whole local system over HTTP and the SQS protocol, on a real database.
//
// This file holds the end-to-end flows that need nothing but the API's URL and the queues: the
// same flows run in CI against the local system (goaws and MariaDB, flows_test.go) and, for people
// with Docker, against LocalStack (../../localstack/e2e_test.go).
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/stretchr/testify/require"
)

// Target is a running system, reached the way clients and operators reach it.
type Target struct {
	// APIURL is the API's base URL, without a trailing slash (…/events is appended).
	APIURL string
	// SQS reaches the queues; QueueURL is the queue the API sends to, DLQURL its dead-letter queue.
	SQS              *sqs.Client
	QueueURL, DLQURL string
	// Settle bounds how long an async event may take to be processed. Default 30 s.
	Settle time.Duration
	// PoisonSettle bounds how long a malformed message may take to reach the DLQ (receive limit
	// times visibility timeout, plus the mapping's retries). Zero skips the flows that need it.
	PoisonSettle time.Duration
	// Exclusive says no one else writes to the system meanwhile, so that counts can be compared.
	Exclusive bool
	// AsyncBy names who may process async events. Default: the processor or the sweeper; a target
	// whose sweeper waits out a long grace period can require the queue path alone.
	AsyncBy []string
	// HTTP is the client; default a client with a 30 s timeout. Either way, every exchange is
	// checked against the API's OpenAPI document (openapitest.Transport), under APIURL's path.
	HTTP *http.Client

	// Receiver receives the task flow's webhooks, where the target's workers may deliver (nil: the
	// task flow skips, saying why).
	Receiver *Receiver
	// CounterQueueURL is the counter service's queue; CounterResultsURL a queue its topic's
	// notifications reach. Empty: the counter flow skips.
	CounterQueueURL, CounterResultsURL string
	// AgentsOnly says the target's queue has no consumer: async events are the agents' alone.
	AgentsOnly bool
}

func (tg Target) client(t *testing.T) *http.Client {
	c := &http.Client{Timeout: 30 * time.Second}
	if tg.HTTP != nil {
		c = new(*tg.HTTP)
	}
	prefix := ""
	if u, err := url.Parse(tg.APIURL); err == nil {
		prefix = strings.TrimSuffix(u.Path, "/")
	}
	c.Transport = openapitest.TransportUnder(t, c.Transport, prefix)
	return c
}

func (tg Target) settle() time.Duration {
	if tg.Settle > 0 {
		return tg.Settle
	}
	return 30 * time.Second
}

// EventView is an event as GET /events/{id} shows it.
type EventView struct {
	ID           int64   `json:"id"`
	Value        *string `json:"value"`
	State        string  `json:"state"`
	ProcessedBy  string  `json:"processedBy"`
	ProcessCount int     `json:"processCount"`
}

func (tg Target) post(t *testing.T, path string) (int, int64) {
	t.Helper()
	resp, err := tg.client(t).Post(tg.APIURL+path, "application/json", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m struct {
		ID    int64  `json:"id"`
		Error string `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return resp.StatusCode, m.ID
}

// Get returns one event through the API.
func (tg Target) Get(t *testing.T, id int64) EventView {
	t.Helper()
	resp, err := tg.client(t).Get(tg.APIURL + "/events/" + strconv.FormatInt(id, 10))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET /events/%d", id)
	var e EventView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	return e
}

// Count returns GET /events.
func (tg Target) Count(t *testing.T) int64 {
	t.Helper()
	resp, err := tg.client(t).Get(tg.APIURL + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var m struct {
		Count int64 `json:"count"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return m.Count
}

func (tg Target) awaitProcessed(t *testing.T, ids []int64, by ...string) {
	t.Helper()
	deadline := time.Now().Add(tg.settle())
	for _, id := range ids {
		var e EventView
		for {
			e = tg.Get(t, id)
			if e.State == "processed" || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.Equal(t, "processed", e.State, "event %d processed within %s", id, tg.settle())
		require.NotNil(t, e.Value, "event %d has its value", id)
		// process_count is the settling UPDATE's guard at work, all a target that cannot hear its
		// workers shows; the local system's tests check the workers' own reports besides
		// (verify.Check).
		require.Equal(t, 1, e.ProcessCount, "event %d processed exactly once", id)
		if len(by) > 0 {
			require.Contains(t, by, e.ProcessedBy, "event %d", id)
		}
	}
}

// FlowCreates: concurrent sync and async creates; every id unique; every sync event processed at
// birth by the API, every async one processed exactly once by the processor (or the sweeper);
// with an exclusive target, GET /events grows by exactly the number of creates.
func FlowCreates(t *testing.T, tg Target, clients, each int) {
	var before int64
	if tg.Exclusive {
		before = tg.Count(t)
	}
	var (
		mu          sync.Mutex
		sync_, asyn []int64
		seen        = map[int64]bool{}
		wg          sync.WaitGroup
		errs        = make(chan error, clients*each)
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				path, want := "/events", http.StatusCreated
				if (c+i)%2 == 1 {
					path, want = "/events/async", http.StatusAccepted
				}
				resp, err := tg.client(t).Post(tg.APIURL+path, "application/json", nil)
				if err != nil {
					errs <- err
					return
				}
				var m struct {
					ID int64 `json:"id"`
				}
				err = json.NewDecoder(resp.Body).Decode(&m)
				resp.Body.Close()
				if err == nil && (resp.StatusCode != want || m.ID <= 0) {
					err = fmt.Errorf("POST %s: %d, id %d", path, resp.StatusCode, m.ID)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if seen[m.ID] {
					errs <- fmt.Errorf("id %d handed out twice", m.ID)
				}
				seen[m.ID] = true
				if want == http.StatusCreated {
					sync_ = append(sync_, m.ID)
				} else {
					asyn = append(asyn, m.ID)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, clients*each, "every id unique")
	tg.awaitProcessed(t, sync_, "api")
	asyncBy := tg.AsyncBy
	if len(asyncBy) == 0 {
		asyncBy = []string{"processor", "sweeper"}
	}
	tg.awaitProcessed(t, asyn, asyncBy...)
	if tg.Exclusive {
		require.Equal(t, before+int64(clients*each), tg.Count(t), "GET /events counts every create, once")
	}
}

// FlowDuplicateMessages: an async event whose message is duplicated five times (as an
// at-least-once queue may) is processed once; every duplicate is acknowledged and none reaches
// the DLQ.
func FlowDuplicateMessages(t *testing.T, tg Target) {
	status, id := tg.post(t, "/events/async")
	require.Equal(t, http.StatusAccepted, status)
	for range 5 {
		_, err := tg.SQS.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(tg.QueueURL), MessageBody: aws.String(fmt.Sprintf(`{"id":%d}`, id)),
		})
		require.NoError(t, err)
	}
	tg.awaitProcessed(t, []int64{id}, "processor", "sweeper")
	if tg.Exclusive {
		deadline := time.Now().Add(tg.settle())
		for !queueEmpty(t, tg.SQS, tg.QueueURL) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		require.True(t, queueEmpty(t, tg.SQS, tg.QueueURL), "every duplicate acknowledged")
	}
	require.Equal(t, 1, tg.Get(t, id).ProcessCount, "still processed once after every duplicate")
}

// FlowPoison: malformed messages end in the DLQ without holding up a good event sent with them.
// Needs PoisonSettle.
func FlowPoison(t *testing.T, tg Target) {
	if tg.PoisonSettle == 0 {
		t.Skip("the target's receive limit times its visibility timeout is too long for this run (set PoisonSettle)")
	}
	token := strconv.FormatInt(time.Now().UnixNano(), 36)
	poison := []string{"poison " + token + ": not json", `{"id":"` + token + `"}`, `{"id":-1,"token":"` + token + `"}`}
	for _, p := range poison {
		_, err := tg.SQS.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(tg.QueueURL), MessageBody: aws.String(p)})
		require.NoError(t, err)
	}
	status, id := tg.post(t, "/events/async")
	require.Equal(t, http.StatusAccepted, status)
	tg.awaitProcessed(t, []int64{id}, "processor", "sweeper")

	found := map[string]bool{}
	deadline := time.Now().Add(tg.PoisonSettle)
	for len(found) < len(poison) && time.Now().Before(deadline) {
		out, err := tg.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(tg.DLQURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 300,
		})
		require.NoError(t, err)
		for _, m := range out.Messages {
			body := aws.ToString(m.Body)
			if strings.Contains(body, token) {
				found[body] = true
				_, _ = tg.SQS.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(tg.DLQURL), ReceiptHandle: m.ReceiptHandle})
			}
		}
	}
	require.Len(t, found, len(poison), "every malformed message reached the DLQ within %s", tg.PoisonSettle)
}

// queueEmpty tells whether a queue has no message, visible or in flight.
func queueEmpty(t *testing.T, client *sqs.Client, url string) bool {
	t.Helper()
	visible, inFlight, err := queue.Depth(context.Background(), client, url)
	require.NoError(t, err)
	return visible+inFlight == 0
}
