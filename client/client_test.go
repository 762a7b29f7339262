package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/client"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
)

// Every route, through the client, against the local system: typed answers, and each exchange
// checked against openapi.yaml (on both sides: the API's handler and the client's transport).
func TestEveryRouteAgainstTheLocalSystem(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	c := s.client(t, client.Retry{})
	ctx := context.Background()

	e, err := c.CreateEvent(ctx)
	require.NoError(t, err)
	require.Equal(t, "processed", e.State)
	require.NotNil(t, e.Value)
	require.False(t, e.Replayed)

	async, err := c.CreateAsyncEvent(ctx)
	require.NoError(t, err)
	testutil.Eventually(t, 20*time.Second, "the async event is processed", func() bool {
		it, err := c.GetEvent(ctx, async.ID)
		return err == nil && it.Event != nil && it.Event.State == "processed"
	})
	n, err := c.CountEvents(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	page, err := c.ListEvents(ctx, client.ListOptions{State: "processed", Kind: "plain", Limit: 1})
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	require.Equal(t, async.ID, page.Events[0].ID(), "newest first")
	require.NotNil(t, page.Next)

	// Tasks: one delivered, one refused by its receiver (a 400 fails it at once), both verified.
	var refuse atomic.Bool
	refuse.Store(true)
	var delivered strings.Builder
	verify, err := newReceiver(signingSecret(), &delivered) // the README's receiver: a bad signature fails the task
	require.NoError(t, err)
	var mu sync.Mutex
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "refuse") && refuse.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		verify.ServeHTTP(w, r)
	}))
	t.Cleanup(recv.Close)
	ok, err := c.CreateTask(ctx, client.NewTask{URL: recv.URL + "/ok", Payload: json.RawMessage(`{"n":1}`), ReferenceID: "ref-ok"})
	require.NoError(t, err)
	zero := 0
	bad, err := c.CreateTask(ctx, client.NewTask{URL: recv.URL + "/refuse", ReferenceID: "ref bad/é", MaxRetries: &zero})
	require.Error(t, err, "a referenceId with a '/' is refused")
	require.ErrorIs(t, err, client.ErrInvalid)
	bad, err = c.CreateTask(ctx, client.NewTask{URL: recv.URL + "/refuse", ReferenceID: "ref bad é", MaxRetries: &zero})
	require.NoError(t, err)
	testutil.Eventually(t, 20*time.Second, "both tasks are settled", func() bool {
		a, err1 := c.GetEvent(ctx, ok.ID)
		b, err2 := c.GetEvent(ctx, bad.ID)
		return err1 == nil && err2 == nil && a.State() == "completed" && b.State() == "failed"
	})
	mu.Lock()
	require.Contains(t, delivered.String(), `: {"n":1}`, "delivered, its signature verified")
	mu.Unlock()
	it, err := c.GetEvent(ctx, bad.ID)
	require.NoError(t, err)
	require.NotNil(t, it.Task)
	require.True(t, it.Task.IsFailed)
	attempts, err := c.TaskAttempts(ctx, bad.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, 400, *attempts[0].Status)
	refs, err := c.ReferenceTasks(ctx, "ref bad é", 0, 10)
	require.NoError(t, err)
	require.Len(t, refs.Events, 1)
	require.Equal(t, bad.ID, refs.Events[0].ID)

	refuse.Store(false)
	retried, err := c.RetryTask(ctx, bad.ID)
	require.NoError(t, err)
	require.Equal(t, "pending", retried.State)
	testutil.Eventually(t, 20*time.Second, "the retried task is delivered", func() bool {
		it, err := c.GetEvent(ctx, bad.ID)
		return err == nil && it.State() == "completed"
	})
	_, err = c.RetryTask(ctx, bad.ID)
	require.ErrorIs(t, err, client.ErrConflict, "a task that has not failed")
	none, err := c.RetryReference(ctx, "ref bad é")
	require.NoError(t, err)
	require.Empty(t, none.Retried)
	require.Nil(t, none.Placement)

	o, err := c.Overview(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, o.Events.Total)
	h, err := c.History(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, h.Total, "%+v", h)
	require.EqualValues(t, h.Total, h.Events.Rows+h.Pages.Events, "%+v", h)
	agents, err := c.Agents(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, agents, "the local sweeper's agent")
	workers, err := c.Workers(ctx, nil)
	require.NoError(t, err)
	require.False(t, workers.Truncated)
	if len(workers.Workers) > 0 {
		w, err := c.Worker(ctx, workers.Workers[0].WorkerID)
		require.NoError(t, err)
		require.Equal(t, workers.Workers[0].WorkerID, w.WorkerID)
	}
	active := true
	_, err = c.Workers(ctx, &active)
	require.NoError(t, err)
	_, err = c.Worker(ctx, "nope")
	require.ErrorIs(t, err, client.ErrNotFound)
	counts, err := c.UserCounts(ctx, "ann")
	require.NoError(t, err)
	require.Empty(t, counts)
	count, err := c.Count(ctx, "ann", "message")
	require.NoError(t, err)
	require.Equal(t, client.Count{}, count)
	doc, err := c.OpenAPIDocument(ctx)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OpenAPI, doc)
}

// The API's errors are typed: errors.Is with the kinds, and the field the message names.
func TestTypedErrors(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	c := s.client(t, client.Retry{})
	ctx := context.Background()

	_, err := c.GetEvent(ctx, 999)
	require.ErrorIs(t, err, client.ErrNotFound)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.Status)
	require.Equal(t, "event 999 not found", apiErr.Message)

	_, err = c.CreateTask(ctx, client.NewTask{URL: "ftp://example.com/x"})
	require.ErrorIs(t, err, client.ErrInvalid)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "url", apiErr.Field, apiErr.Message)
	// A number no JSON reader of the task or its webhook could read back: refused, naming its place.
	_, err = c.CreateTask(ctx, client.NewTask{URL: "https://example.com/x", Payload: json.RawMessage(`{"n": [1e400]}`)})
	require.ErrorIs(t, err, client.ErrInvalid)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "payload", apiErr.Field, apiErr.Message)
	require.Contains(t, apiErr.Message, "payload.n[0]: the number 1e400 is outside the range of a 64-bit float")
	many := 99
	_, err = c.CreateTask(ctx, client.NewTask{URL: "https://example.com/x", MaxRetries: &many})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "maxRetries", apiErr.Field, apiErr.Message)
	_, err = c.ListEvents(ctx, client.ListOptions{State: "lost"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "state", apiErr.Field, apiErr.Message)

	// A key given by the caller, reused with another request: nothing written, and not retried.
	_, err = c.CreateEvent(ctx, client.WithIdempotencyKey("order-42"))
	require.NoError(t, err)
	before := s.events(t)
	_, err = c.CreateTask(ctx, client.NewTask{URL: "https://example.com/x"}, client.WithIdempotencyKey("order-42"))
	require.ErrorIs(t, err, client.ErrKeyReused)
	require.Equal(t, 1, s.creates("order-42")-1, "a 422 is not retried")
	require.Equal(t, before, s.events(t))
	again, err := c.CreateEvent(ctx, client.WithIdempotencyKey("order-42"))
	require.NoError(t, err)
	require.True(t, again.Replayed)

	ctx, cancel := context.WithTimeout(ctx, 0)
	defer cancel()
	_, err = c.CountEvents(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A create whose answer is lost after the API committed it (the connection cut before the answer):
// the client retries it with the same key, and gets the original event; one event exists.
func TestCreateRetriedAfterTheConnectionIsCutAfterCommit(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	c := s.client(t, client.Retry{BaseDelay: time.Millisecond})
	ctx := context.Background()

	var keys []string
	s.cutAfterCommit.Store(1)
	e, err := c.CreateEvent(ctx, client.WithIdempotencyKey("cut-sync"))
	require.NoError(t, err)
	require.True(t, e.Replayed, "the answer is the first attempt's, stored with its key")
	keys = append(keys, "cut-sync")
	require.Equal(t, 1, s.events(t))
	it, err := c.GetEvent(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, *e.Value, *it.Event.Value, "the original event")

	// A task: its body is one net/http would not resend by itself; the client's retry does.
	s.cutAfterCommit.Store(1)
	task, err := c.CreateTask(ctx, client.NewTask{URL: "https://example.com/x", ReferenceID: "cut"}, client.WithIdempotencyKey("cut-task"))
	require.NoError(t, err)
	require.True(t, task.Replayed)
	keys = append(keys, "cut-task")
	require.Equal(t, 2, s.events(t), "one event per logical create")
	for _, k := range keys {
		require.Equal(t, 2, s.creates(k), "%s: the cut attempt and its retry", k)
	}

	// Without a key of the caller's, the client's own key does the same.
	s.cutAfterCommit.Store(1)
	a, err := c.CreateAsyncEvent(ctx)
	require.NoError(t, err)
	require.True(t, a.Replayed)
	require.Equal(t, 3, s.events(t))
}

// A create whose database commit's reply is lost (the fault proxy lets the INSERT commit and cuts
// the API's connection): the API answers 503 with Retry-After; the client waits and retries with
// the same key; the retry answers the original event; one event exists.
func TestCreateRetriedAfterACommitWhoseReplyIsLost(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	c := s.client(t, client.Retry{BaseDelay: time.Millisecond})
	ctx := context.Background()
	_, err := c.CreateEvent(ctx) // the id counter's own transactions are behind us
	require.NoError(t, err)

	for _, create := range []func() (int64, bool, error){
		func() (int64, bool, error) {
			e, err := c.CreateEvent(ctx, client.WithIdempotencyKey("lost-sync"))
			return e.ID, e.Replayed, err
		},
		func() (int64, bool, error) {
			e, err := c.CreateAsyncEvent(ctx, client.WithIdempotencyKey("lost-async"))
			return e.ID, e.Replayed, err
		},
	} {
		before := s.events(t)
		lost := s.proxy.LostStatementReplies.Load()
		s.proxy.LoseRepliesCommitting("INSERT INTO events", 1)
		start := time.Now()
		id, replayed, err := create()
		require.NoError(t, err)
		require.Equal(t, lost+1, s.proxy.LostStatementReplies.Load(), "the first attempt committed and its reply was lost")
		require.True(t, replayed, "the retry answered the stored answer")
		require.GreaterOrEqual(t, time.Since(start), time.Second, "the 503's Retry-After (1 s) was waited")
		require.Equal(t, before+1, s.events(t), "one event")
		_, err = c.GetEvent(ctx, id)
		require.NoError(t, err)
	}
	require.Equal(t, 2, s.creates("lost-sync"))
	require.Equal(t, 2, s.creates("lost-async"))
}
