package client_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/client"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
)

// serve runs h on a loopback listener of its own (for answers openapi.yaml does not describe,
// such as API Gateway's or a cut connection) and returns its URL. Not httptest.NewServer: its Close
// waits for the requests in flight, and some of these handlers hold theirs until the test ends.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// An empty key of the caller's (WithIdempotencyKey("")) is refused before anything is sent, as the
// API refuses an empty Idempotency-Key: it used to send the create with no key at all and retry it
// on a 503 or a cut connection, each attempt able to store another event.
func TestAnEmptyIdempotencyKeyIsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	api := &scripted{script: []int{503, 503, 503}, retryAfter: "0"}
	c := newClient(t, serve(t, api), client.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond})
	ctx := context.Background()
	_, err := c.CreateEvent(ctx, client.WithIdempotencyKey(""))
	requireInvalid(t, err, "Idempotency-Key")
	_, err = c.CreateAsyncEvent(ctx, client.WithIdempotencyKey(""))
	requireInvalid(t, err, "Idempotency-Key")
	_, err = c.CreateTask(ctx, client.NewTask{URL: "http://127.0.0.1:1/x"}, client.WithIdempotencyKey(""))
	requireInvalid(t, err, "Idempotency-Key")
	require.Empty(t, api.requests(), "nothing is sent")

	// A control character, which net/http refuses to send: it was taken for a connection error,
	// retried MaxAttempts times and answered ErrUnavailable, "no answer", for the caller's mistake.
	for _, key := range []string{"order\n42", "order\r42", "a\x00", "\x7f", "tab\there"} {
		_, err = c.CreateEvent(ctx, client.WithIdempotencyKey(key))
		requireInvalid(t, err, "Idempotency-Key")
		require.NotErrorIs(t, err, client.ErrUnavailable)
	}
	require.Empty(t, api.requests(), "nothing is sent")
}

// A retry of a task or of a reference is not a create: it has no key to make a second attempt
// harmless, so an answer that leaves unknown whether it was done (a 503, whose write may have
// committed, or a connection cut once the request was sent) is returned, not retried, where a
// second attempt could retry again a task that had failed again meanwhile, a second round of
// deliveries nobody asked for. What certainly did nothing is retried: a 429 (throttled before
// the API), a connection refused.
func TestTaskRetriesAreNotRepeatedAfterAnAnswerLeftUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	retried := `{"id":5,"state":"pending","placement":"unordered"}`

	api := &scripted{script: []int{503}, retryAfter: "0", ok: retried}
	c := newClient(t, openapitest.NewServer(t, api).URL, client.Retry{BaseDelay: time.Millisecond})
	_, err := c.RetryTask(ctx, 5)
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.Len(t, api.requests(), 1, "a task's retry answered 503 is not sent again")

	api = &scripted{script: []int{503}, retryAfter: "0", ok: `{"referenceId":"r","retried":[5],"placement":"in-place","more":false}`}
	c = newClient(t, openapitest.NewServer(t, api).URL, client.Retry{BaseDelay: time.Millisecond})
	_, err = c.RetryReference(ctx, "r")
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.Len(t, api.requests(), 1, "a reference's retry answered 503 is not sent again")

	// The connection cut once the request arrived: the API may have done it.
	var cuts scripted
	cut := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cuts.ServeHTTP(discard{}, r) // counts it
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	c = newClient(t, cut, client.Retry{BaseDelay: time.Millisecond})
	_, err = c.RetryTask(ctx, 5)
	require.ErrorIs(t, err, client.ErrUnavailable)
	var connErr *client.ConnectionError
	require.ErrorAs(t, err, &connErr)
	require.Len(t, cuts.requests(), 1, "a task's retry whose connection was cut is not sent again")

	// Throttled by API Gateway: nothing was done, so it is retried.
	api = &scripted{script: []int{429}, ok: retried}
	c = newClient(t, serve(t, api), client.Retry{BaseDelay: time.Millisecond})
	got, err := c.RetryTask(ctx, 5)
	require.NoError(t, err)
	require.Equal(t, "pending", got.State)
	require.Len(t, api.requests(), 2)

	// Reads are retried on a 503 as before.
	api = &scripted{script: []int{503}, retryAfter: "0"}
	n, err := newClient(t, openapitest.NewServer(t, api).URL, client.Retry{BaseDelay: time.Millisecond}).CountEvents(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 7, n)
	require.Len(t, api.requests(), 2)
}

// A connection refused did nothing: a task's retry is sent again then. The first two dials go to
// a port nothing listens on (a real refusal), the third to the API.
func TestATaskRetryIsRetriedWhenTheConnectionIsRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	ln.Close()
	api := &scripted{ok: `{"id":5,"state":"pending","placement":"unordered"}`}
	up := strings.TrimPrefix(serve(t, api), "http://")
	var dials atomic.Int32
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		addr := up
		if dials.Add(1) <= 2 {
			addr = closed
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New("http://api.invalid", client.Options{HTTPClient: &http.Client{Transport: tr},
		Retry: client.Retry{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	require.NoError(t, err)
	got, err := c.RetryTask(context.Background(), 5)
	require.NoError(t, err)
	require.Equal(t, "pending", got.State)
	require.EqualValues(t, 3, dials.Load())
	require.Len(t, api.requests(), 1)
}

type discard struct{ http.ResponseWriter }

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// Workers says when the API ended the list at 4 MiB: the caller learns that workers were left
// out, where the list used to look complete.
func TestWorkersSaysTheListWasTruncated(t *testing.T) {
	t.Parallel()
	api := &scripted{ok: `{"workers":[],"truncated":true}`}
	list, err := newClient(t, openapitest.NewServer(t, api).URL, client.Retry{}).Workers(context.Background(), nil)
	require.NoError(t, err)
	require.True(t, list.Truncated)
	api = &scripted{ok: `{"workers":[]}`}
	list, err = newClient(t, openapitest.NewServer(t, api).URL, client.Retry{}).Workers(context.Background(), nil)
	require.NoError(t, err)
	require.False(t, list.Truncated)
}

// A user id, entity type or referenceId that a URL path cannot carry is refused before anything is
// sent, as the API refuses it (exactlyonce.CheckPathName): the API decodes a path before it routes
// it, so "alice/bob" escaped as alice%2Fbob reached GET /counters/alice/bob, and UserCounts
// answered alice's count of type bob read as an empty map, with no error.
func TestNamesAPathCannotCarryAreRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	_, c, store := pagingStack(t)
	ctx := context.Background()
	_, err := store.Counters.ApplyCounterMessages(ctx, []exactlyonce.CounterMessage{
		{EntityID: "e", EntityType: "bob", UserID: "alice", Action: exactlyonce.CounterAdded}})
	require.NoError(t, err)
	counts, err := c.UserCounts(ctx, "alice/bob")
	requireInvalid(t, err, "userId")
	require.Nil(t, counts)

	api := &scripted{}
	c = newClient(t, openapitest.NewServer(t, api).URL, client.Retry{})
	for _, bad := range []string{"", "a/b", `a\b`, ".", "..", "t ", "a\x00", strings.Repeat("x", 256), "\xff"} {
		_, err = c.UserCounts(ctx, bad)
		requireInvalid(t, err, "userId")
		_, err = c.Count(ctx, bad, "message")
		requireInvalid(t, err, "userId")
		_, err = c.Count(ctx, "alice", bad)
		requireInvalid(t, err, "entityType")
		_, err = c.ReferenceTasks(ctx, bad, 0, 0)
		requireInvalid(t, err, "referenceId")
		_, err = c.RetryReference(ctx, bad)
		requireInvalid(t, err, "referenceId")
		// Worker sent "" as GET /workers/ and "a/b" as GET /workers/a%2Fb, which the API decodes
		// to /workers/a/b: requests to other routes, answered as whatever those are.
		_, err = c.Worker(ctx, bad)
		requireInvalid(t, err, "workerId")
	}
	require.Empty(t, api.requests(), "nothing is sent")
}

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, client.ErrInvalid)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, field, apiErr.Field, apiErr.Message)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
	require.True(t, apiErr.Local)
	require.True(t, strings.HasPrefix(err.Error(), "exactlyonce client, not sent: 400 Bad Request: "+field), err.Error())
}

// The client's check of a path's name is the API's (exactlyonce.CheckPathName), message for
// message.
func TestTheClientChecksPathNamesAsTheAPIDoes(t *testing.T) {
	t.Parallel()
	api := &scripted{ok: `{"userId":"u","entityType":"t","sum":0,"version":0}`}
	c := newClient(t, openapitest.NewServer(t, api).URL, client.Retry{})
	for _, v := range []string{"", "u", "a/b", `a\b`, ".", "..", "...", ".a", "t ", " t", "a\x00", "a\x7f", "a\u0085", "a\u2028",
		strings.Repeat("é", 255), strings.Repeat("é", 256), "\xff", "😀", "%2F", "a?b#c"} {
		want := exactlyonce.CheckPathName("entityType", v)
		_, err := c.Count(context.Background(), "u", v)
		if want == nil {
			require.NoError(t, err, "%q", v)
			continue
		}
		requireInvalid(t, err, "entityType")
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, exactlyonce.ErrorMessage(want), apiErr.Message, "%q", v)
		require.True(t, apiErr.Local)
	}
}

// API Gateway answers 502 when the function failed and 504 when it timed out: a create may have
// been stored then (openapi.yaml says: retry it with the same Idempotency-Key). A keyed create and
// a read are retried, with the create's key; a task's retry is not. They were returned at once, and
// the key was the client's own, so the caller could not retry the create safely.
func TestA502Or504IsRetriedWhenARepeatIsHarmless(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, status := range []int{502, 504} {
		api := &scripted{script: []int{status}, okStatus: http.StatusCreated,
			ok: `{"id":5,"value":"v","state":"processed","processedBy":"api","processCount":1}`}
		c := newClient(t, serve(t, api), client.Retry{BaseDelay: time.Millisecond})
		e, err := c.CreateEvent(ctx)
		require.NoError(t, err, "%d", status)
		require.EqualValues(t, 5, e.ID)
		api.mu.Lock()
		keys := api.keys
		api.mu.Unlock()
		require.Len(t, keys, 2)
		require.Equal(t, keys[0], keys[1], "the create's key, again")

		api = &scripted{script: []int{status}}
		n, err := newClient(t, serve(t, api), client.Retry{BaseDelay: time.Millisecond}).CountEvents(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 7, n)

		api = &scripted{script: []int{status}, ok: `{"id":5,"state":"pending","placement":"unordered"}`}
		_, err = newClient(t, serve(t, api), client.Retry{BaseDelay: time.Millisecond}).RetryTask(ctx, 5)
		require.Error(t, err)
		require.Len(t, api.requests(), 1, "a task's retry answered %d is not sent again", status)
	}
}

// A create that failed after its retries says which key it carried, so that the caller can call
// it again, later, as the same create (WithIdempotencyKey): "with its key, calling it again is
// safe" was advice a caller could not follow with a key the client had generated.
func TestAFailedCreateSaysItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	api := &scripted{script: []int{503, 503}, retryAfter: "0", okStatus: http.StatusCreated,
		ok: `{"id":5,"value":"v","state":"processed","processedBy":"api","processCount":1}`}
	c := newClient(t, serve(t, api), client.Retry{MaxAttempts: 2, BaseDelay: time.Millisecond})
	_, err := c.CreateEvent(ctx)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Regexp(t, `^eo-[0-9a-f]{32}$`, apiErr.IdempotencyKey)
	_, err = c.CreateEvent(ctx, client.WithIdempotencyKey(apiErr.IdempotencyKey))
	require.NoError(t, err)
	api.mu.Lock()
	keys := append([]string(nil), api.keys...)
	api.mu.Unlock()
	require.Equal(t, []string{apiErr.IdempotencyKey, apiErr.IdempotencyKey, apiErr.IdempotencyKey}, keys)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, err = newClient(t, "http://"+addr, client.Retry{MaxAttempts: 2, BaseDelay: time.Millisecond}).CreateEvent(ctx,
		client.WithIdempotencyKey("order-42"))
	var connErr *client.ConnectionError
	require.ErrorAs(t, err, &connErr)
	require.Equal(t, "order-42", connErr.IdempotencyKey)

	_, err = newClient(t, serve(t, &scripted{script: []int{404}}), client.Retry{}).CountEvents(ctx)
	require.ErrorAs(t, err, &apiErr)
	require.Empty(t, apiErr.IdempotencyKey, "a read has none")
}

// A create whose context ends while an attempt waits for its answer may have been stored: the
// error says the context ended and carries the create's key, as a *ConnectionError, to call it
// again as the same create. It carried neither the key nor the kind.
func TestACreateCutShortByItsContextSaysItsKey(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hang := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	c := newClient(t, hang, client.Retry{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.CreateEvent(ctx, client.WithIdempotencyKey("order-7"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var connErr *client.ConnectionError
	require.ErrorAs(t, err, &connErr)
	require.Equal(t, "order-7", connErr.IdempotencyKey)
}

// The API retries a reference's failed tasks in parts and answers "more" while some remain:
// RetryReference calls it again until none does, and returns every task retried, in order, with
// the placement of the first answer. An error after some parts returns what they retried (a
// repeat goes on where it stopped).
func TestARetryOfAReferenceFollowsTheAPIsParts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls atomic.Int32
	answers := []string{
		`{"referenceId":"r","retried":[1,2],"placement":"in-place","more":true}`,
		`{"referenceId":"r","retried":[3,4],"placement":"in-place","more":true}`,
		`{"referenceId":"r","retried":[5],"placement":"in-place","more":false}`,
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(calls.Add(1)) - 1
		w.Header().Set("Content-Type", "application/json")
		if n >= len(answers) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":"internal error"}`))
			return
		}
		_, _ = w.Write([]byte(answers[n]))
	})
	c := newClient(t, openapitest.NewServer(t, api).URL, client.Retry{BaseDelay: time.Millisecond})
	got, err := c.RetryReference(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3, 4, 5}, got.Retried)
	require.Equal(t, "in-place", *got.Placement)
	require.False(t, got.More)
	require.EqualValues(t, 3, calls.Load())

	answers = answers[:1] // the second call fails
	calls.Store(0)
	got, err = c.RetryReference(ctx, "r")
	require.Error(t, err)
	require.Equal(t, []int64{1, 2}, got.Retried, "what the first call retried")
}
