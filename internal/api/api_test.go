package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// recordingQueue records the ids sent, or fails every send.
type recordingQueue struct {
	mu       sync.Mutex
	ids      []int64
	messages int
	fail     bool
}

func (q *recordingQueue) Send(_ context.Context, ids []int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fail {
		return errors.New("queue down")
	}
	q.ids = append(q.ids, ids...)
	q.messages++
	return nil
}

type testBundle struct {
	store *wire.Stores
	queue *recordingQueue
	srv   *httptest.Server
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{store: wire.NewStores(testdb.Core(t, mysql.Config{}, 4)), queue: &recordingQueue{}}
	b.srv = openapitest.NewServer(t, &api.Server{Stores: b.store.API(), Queue: b.queue, MaxBodyBytes: 1024})
	t.Cleanup(b.srv.Close)
	return b
}

func (b *testBundle) do(t *testing.T, method, path, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "body: %s", raw)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "body: %s", raw)
	return resp.StatusCode, m, resp.Header
}

func TestCreateGetCount(t *testing.T) {
	t.Parallel()
	b := setup(t)

	status, body, _ := b.do(t, "POST", "/events", "")
	require.Equal(t, http.StatusCreated, status)
	id := int64(body["id"].(float64))
	require.Positive(t, id)
	value := body["value"].(string)
	require.NotEmpty(t, value)

	for _, empty := range []string{"{}", " {\r\n\t} \n", " \t\r\n"} {
		status, body, _ = b.do(t, "POST", "/events", empty)
		require.Equal(t, http.StatusCreated, status, "%q", empty)
		require.NotEqual(t, id, int64(body["id"].(float64)))
	}

	status, body, _ = b.do(t, "GET", "/events/"+jsonID(id), "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, value, body["value"])
	require.Equal(t, "processed", body["state"])

	status, body, _ = b.do(t, "GET", "/events", "")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 4, body["count"])
}

func TestCreateAsyncQueuesAfterInsert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, body, _ := b.do(t, "POST", "/events/async", "")
	require.Equal(t, http.StatusAccepted, status)
	id := int64(body["id"].(float64))
	require.Equal(t, []int64{id}, b.queue.ids)
	require.Len(t, body, 1, "the async answer is just the id")

	status, body, _ = b.do(t, "GET", "/events/"+jsonID(id), "")
	require.Equal(t, http.StatusOK, status)
	require.Nil(t, body["value"])
	require.Equal(t, "pending", body["state"])
}

func TestCreateAsyncWhenTheQueueIsDownStillStoresAndAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.queue.fail = true
	status, body, _ := b.do(t, "POST", "/events/async", "")
	require.Equal(t, http.StatusAccepted, status)
	e, err := b.store.Events.Get(context.Background(), int64(body["id"].(float64)))
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, e.State, "left pending for the sweeper")
}

func TestErrorsAreJSONAndWriteNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/events/0", "", 400},
		{"GET", "/events/-1", "", 400},
		{"GET", "/events/abc", "", 400},
		{"GET", "/events/1.5", "", 400},
		{"GET", "/events/007", "", 400},
		{"GET", "/events/99999999999999999999999", "", 400},
		{"GET", "/events/1%27%20OR%201=1", "", 400},
		{"GET", "/events/123456", "", 404},
		{"GET", "/nope", "", 404},
		{"GET", "/events/1/x", "", 404},
		{"DELETE", "/events", "", 405},
		{"PUT", "/events/1", "", 405},
		{"GET", "/events/async", "", 405}, // the resource exists, for POST
		{"PATCH", "/events/async", "", 405},
		{"POST", "/events", "not json", 400},
		{"POST", "/events", "[1,2]", 400},
		// JSON, but not an object: the README asks for an object
		{"POST", "/events", "null", 400},
		{"POST", "/events", " \n null \t", 400},
		{"POST", "/events/async", "null", 400},
		{"POST", "/events", "[]", 400},
		{"POST", "/events/async", `"x"`, 400},
		{"POST", "/events", "1", 400},
		{"POST", "/events", "true", 400},
		{"POST", "/events", "\f", 400}, // not JSON whitespace, so not an empty body
		{"POST", "/events", `{"a":1}`, 400},
		{"POST", "/events", `{} {}`, 400},
		{"POST", "/events", `{"value":"mine"}`, 400},
		{"POST", "/events/async", `{"id": 5}`, 400},
		{"POST", "/events", `{"a":"` + strings.Repeat("x", 2048) + `"}`, 413},
	} {
		status, body, hdr := b.do(t, tc.method, tc.path, tc.body)
		require.Equal(t, tc.status, status, "%s %s", tc.method, tc.path)
		msg, ok := body["error"].(string)
		require.True(t, ok && msg != "", "%s %s: error message in %v", tc.method, tc.path, body)
		if status == 405 {
			require.NotEmpty(t, hdr.Get("Allow"))
		}
	}
	n, err := b.store.Events.Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "no request above may write")
	require.Empty(t, b.queue.ids)
}

// A body that is not JSON says so, and where it broke (the offset of the byte, from 0); one that is JSON but no object says that;
// one object followed by more says that: a trailing comma in an object was answered "request body
// must be a JSON object", which sent its writer looking for a problem it did not have.
func TestMalformedBodiesSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ path, body, want string }{
		{"/events/async", `{"url":"http://example.com/hook",}`, "request body is not valid JSON (at offset 33)"},
		{"/events/async", `{"url":`, "request body is not valid JSON (at offset 7)"},
		{"/events/async", `{'url':1}`, "request body is not valid JSON (at offset 1)"},
		{"/events", `nul`, "request body is not valid JSON (at offset 3)"},
		{"/events/async", `{"url":"x"}}`, "request body must be one JSON object, with nothing after it"},
		{"/events", `{} {}`, "request body must be one JSON object, with nothing after it"},
		{"/events/async", `"x"`, "request body must be a JSON object"},
		{"/events", `[]`, "request body must be a JSON object"},
		{"/events/1/retry", `{,}`, "request body is not valid JSON (at offset 1)"},
	} {
		status, body, _ := b.do(t, "POST", tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, status, tc.body)
		require.Equal(t, tc.want, body["error"], tc.body)
	}
	n, err := b.store.Events.Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestDatabaseUnreachableIs503WithoutInternalText(t *testing.T) {
	t.Parallel()
	srv := openapitest.NewServer(t, &api.Server{Stores: wire.NewStores(testdb.UnreachableCore(t)).API()})
	defer srv.Close()
	b := &testBundle{srv: srv}
	for _, path := range []string{"/events", "/events/async"} {
		status, body, hdr := b.do(t, "POST", path, "")
		require.Equal(t, http.StatusServiceUnavailable, status)
		require.Equal(t, "the database is unavailable; try again", body["error"])
		require.NotContains(t, body["error"], "127.0.0.1")
		require.Equal(t, "1", hdr.Get("Retry-After"))
	}
	status, _, _ := b.do(t, "GET", "/events/1", "")
	require.Equal(t, http.StatusServiceUnavailable, status)
}

func jsonID(id int64) string { b, _ := json.Marshal(id); return string(b) }

// Every answer says X-Content-Type-Options: nosniff, errors, replays and the OpenAPI document
// included: an answer carries what callers stored (a task's payload, url and referenceId, a
// receiver's error text), and no browser may take it for anything but its declared type.
func TestEveryAnswerForbidsSniffing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	markup := `{"url":"http://192.0.2.1.nip.io/<script>","referenceId":"<img src=x onerror=alert(1)>","payload":{"h":"<script>alert(1)</script>"}}`
	for _, c := range []struct{ method, path, body, key string }{
		{"POST", "/events", "", ""},
		{"POST", "/events", "", "k-1"},
		{"POST", "/events", "", "k-1"}, // the replay
		{"POST", "/events/async", markup, ""},
		{"GET", "/events/1", "", ""},
		{"GET", "/events/999999", "", ""},
		{"GET", "/events/<script>", "", ""},
		{"GET", "/events?state=<b>", "", ""},
		{"DELETE", "/events", "", ""},
		{"GET", "/nowhere", "", ""},
		{"GET", "/references/%3Cimg%3E/events", "", ""},
		{"GET", "/openapi.yaml", "", ""},
	} {
		req, err := http.NewRequest(c.method, b.srv.URL+c.path, strings.NewReader(c.body))
		require.NoError(t, err)
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), "%s %s (%d)", c.method, c.path, resp.StatusCode)
	}
}
