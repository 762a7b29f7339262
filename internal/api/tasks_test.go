package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func taskServer(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{store: wire.NewStores(testdb.Core(t, mysql.Config{}, 4)), queue: &recordingQueue{}}
	// Its receivers listen on loopback.
	b.srv = openapitest.NewServer(t, &api.Server{Stores: b.store.API(), Queue: b.queue, Webhook: webhook.Policy{AllowLoopback: true}})
	t.Cleanup(b.srv.Close)
	return b
}

// Every mistake in a task's create is a 400 that names the field, and writes nothing.
func TestTaskValidation(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	for _, tc := range []struct{ body, names string }{
		{`{"url": "ftp://example.com/x"}`, "url"},
		{`{"url": "javascript:alert(1)"}`, "url"},
		{`{"url": "https://user:pass@example.com/x"}`, "url"},
		{`{"url": "https://example.com/` + strings.Repeat("a", 2049) + `"}`, "url"},
		{`{"url": "https:///nohost"}`, "url"},
		{`{"url": 5}`, "url"},
		{`{"payload": {}}`, "url"},
		{`{"url": "https://example.com/x", "payload": "` + strings.Repeat("p", 256<<10) + `"}`, "payload"},
		// Invalid UTF-8 is not JSON text: stored, it made every answer that shows the task invalid too.
		{"{\"url\": \"https://example.com/x\", \"payload\": \"a\xffb\"}", "payload"},
		{"{\"url\": \"https://example.com/x\", \"payload\": {\"k\": [\"\xc3\"]}}", "payload"},
		// A lone surrogate escape is no character: Go's decoder (a receiver, the Go client's users)
		// reads it as U+FFFD, so the payload would not read back as sent.
		{`{"url": "https://example.com/x", "payload": "\ud800"}`, "payload holds a lone UTF-16 surrogate"},
		{`{"url": "https://example.com/x", "payload": {"k": ["a\udc00b"]}}`, "payload holds a lone UTF-16 surrogate"},
		{`{"url": "https://example.com/x", "payload": {"\ud83dx": 1}}`, "payload holds a lone UTF-16 surrogate"},
		{`{"url": "https://example.com/x", "extra": 1}`, "extra"},
		{`{"url": "https://example.com/x", "referenceId": ""}`, "referenceId"},
		{`{"url": "https://example.com/x", "referenceId": "` + strings.Repeat("r", 256) + `"}`, "referenceId"},
		{`{"url": "https://example.com/x", "referenceId": 7}`, "referenceId"},
		{`{"url": "https://example.com/x", "referenceId": "a/b"}`, "referenceId"},
		{`{"url": "https://example.com/x", "referenceId": "a\u0085b"}`, "referenceId"}, // a C1 control character
		{`{"url": "https://example.com/x", "maxRetries": 26}`, "maxRetries"},
		{`{"url": "https://example.com/x", "maxRetries": -1}`, "maxRetries"},
		{`{"url": "https://example.com/x", "maxRetries": 2.5}`, "maxRetries"},
		{`{"url": "https://example.com/x", "maxRetries": "3"}`, "maxRetries"},
		{`{"url": "https://example.com/x", "maxRetries": 1e400}`, "maxRetries"},
		{`{"url": "https://example.com/x", "maxRetries": 2.6e1}`, "maxRetries"},
		{`{"url": "https://example.com/x", "maxRetries": null}`, "maxRetries"},
		// A payload nested deeper than a task's answers and receivers can read it back: the listing
		// nests it three levels deeper, and Go's decoder (the console's proxy, the Go client) stops
		// at 10,000, Ruby's JSON at 100 by default.
		{`{"url": "https://example.com/x", "payload": ` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`,
			"payload nests values 65 deep; at most 64"},
		{`{"url": "https://example.com/x", "payload": ` + strings.Repeat(`{"a":`, 9000) + "1" + strings.Repeat("}", 9000) + `}`,
			"payload nests values 9000 deep; at most 64"},
		// Valid JSON nested past what encoding/json reads: said as such, not "not valid JSON".
		{`{"url": "https://example.com/x", "payload": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
			"request body nests values more than 10000 deep"},
	} {
		status, body, _ := b.do(t, "POST", "/events/async", tc.body)
		require.Equal(t, http.StatusBadRequest, status, "%.80s", tc.body)
		require.Contains(t, body["error"], tc.names, "%.80s", tc.body)
		require.NotContains(t, body["error"], "url: url", "%.80s: the field named once", tc.body)
	}
	n, err := b.store.Events.Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "no request above may write")
	require.Empty(t, b.queue.ids)

	// The limits themselves are accepted: 255 characters of reference, 25 retries, 256 KiB of payload.
	status, _, _ := b.do(t, "POST", "/events/async", `{"url": "https://example.com/x", "referenceId": "`+strings.Repeat("é", 255)+
		`", "maxRetries": 25, "payload": "`+strings.Repeat("p", 256<<10-2)+`"}`)
	require.Equal(t, http.StatusAccepted, status)

	// A payload nested 64 deep is taken, and reads back, alone and in the listing (b.do decodes
	// each answer with encoding/json); brackets in a string nest nothing.
	deep := strings.Repeat(`[{"k":`, 32) + `"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[{{{{"` + strings.Repeat("}]", 32)
	id := createTask(t, b, `{"url": "https://example.com/x", "payload": `+deep+`}`)
	status, task, _ := b.do(t, "GET", fmt.Sprintf("/events/%d", id), "")
	require.Equal(t, http.StatusOK, status)
	raw, err := json.Marshal(task["payload"])
	require.NoError(t, err)
	require.JSONEq(t, deep, string(raw))
	status, _, _ = b.do(t, "GET", "/events?state=pending", "")
	require.Equal(t, http.StatusOK, status)

	// Every JSON value is a payload, null too (the default, docs/tasks.md): the document must
	// accept each (openapitest checks this request against it), where its payload schema, with no
	// type, was read by kin-openapi as refusing null.
	for _, payload := range []string{`null`, `{"a": [1, null]}`, `[]`, `"s"`, `1.5`, `true`, `"\ud83d\ude00 \\ud800"`, `1e308`, `1e-400`} {
		status, body, _ := b.do(t, "POST", "/events/async", `{"url": "https://example.com/x", "payload": `+payload+`}`)
		require.Equal(t, http.StatusAccepted, status, payload)
		e, err := b.store.Events.Get(context.Background(), int64(body["id"].(float64)))
		require.NoError(t, err)
		require.JSONEq(t, payload, string(e.Task.Payload), payload)
	}

	// An integer written as JSON Schema's "integer" (the contract's type) allows: 3.0, 1e1, -0.
	for raw, want := range map[string]int{"3.0": 3, "1e1": 10, "-0": 0, "2.5e1": 25} {
		status, body, _ := b.do(t, "POST", "/events/async", `{"url": "https://example.com/x", "maxRetries": `+raw+`}`)
		require.Equal(t, http.StatusAccepted, status, raw)
		id := int64(body["id"].(float64))
		e, err := b.store.Events.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, want, e.Task.MaxRetries, raw)
	}
}

// hookRecorder answers each delivery with the status of a script, and records what it received.
type hookRecorder struct {
	mu     sync.Mutex
	status []int // answered in turn; the last one repeats
	bodies []string
	ids    []string
}

func (h *hookRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bodies = append(h.bodies, string(body))
	h.ids = append(h.ids, r.Header.Get("webhook-id"))
	st := h.status[min(len(h.bodies), len(h.status))-1]
	w.WriteHeader(st)
	_, _ = fmt.Fprintf(w, "answer %d", st)
}

func deliverAll(t *testing.T, store *wire.Stores) {
	t.Helper()
	e := deliverer(store)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := e.ProcessDue(context.Background(), 0, 50)
		require.NoError(t, err)
		if b.Claimed == 0 {
			// Nothing due: done, unless a task waits its (millisecond) backoff.
			out, err := store.Events.Outcomes(context.Background(), openIDs(t, store))
			require.NoError(t, err)
			if len(out) == 0 {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	t.Fatal("tasks still open after 30 s")
}

// deliverer is a sweeper's engine delivering to loopback, with millisecond backoffs.
func deliverer(store *wire.Stores) *processing.Engine {
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: 5 * time.Second})
	return &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Tasks: &processing.Tasks{Deliverer: client,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond}}
}

// openIDs lists the open events (for a test's small database only: it scans the table).
func openIDs(t *testing.T, store *wire.Stores) []int64 {
	rows, err := store.DB.Pool().Query("SELECT id FROM events WHERE state < 10")
	require.NoError(t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	return ids
}

func createTask(t *testing.T, b *testBundle, body string) int64 {
	t.Helper()
	status, answer, _ := b.do(t, "POST", "/events/async", body)
	require.Equal(t, http.StatusAccepted, status, "%v", answer)
	return int64(answer["id"].(float64))
}

// A task's life through the API: created, delivered after two 503s, shown with its fields and its
// attempts; a 400 fails the next one at once, which a manual retry puts back; the reference lists
// them in delivery order.
func TestTaskLifeThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	hook := &hookRecorder{status: []int{503, 503, 200, 400, 200}}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)

	first := createTask(t, b, `{"url": "`+recv.URL+`/a", "payload": {"n": 1}, "referenceId": "order-7", "maxRetries": 5}`)
	second := createTask(t, b, `{"url": "`+recv.URL+`/b", "payload": [2], "referenceId": "order-7"}`)
	require.Equal(t, []int64{first}, b.queue.ids, "only the reference's head is queued; the second waits for it")

	status, got, _ := b.do(t, "GET", fmt.Sprintf("/events/%d", second), "")
	require.Equal(t, 200, status)
	require.Equal(t, "queued", got["state"], "behind the first, as GET /events?state=queued lists it")
	require.Equal(t, "order-7", got["referenceId"])
	require.EqualValues(t, 3, got["maxRetries"], "the default")
	require.Equal(t, []any{2.0}, got["payload"])

	deliverAll(t, b.store)
	status, got, _ = b.do(t, "GET", fmt.Sprintf("/events/%d", first), "")
	require.Equal(t, 200, status)
	require.Equal(t, "completed", got["state"])
	require.Equal(t, true, got["isCompleted"])
	require.Equal(t, false, got["isFailed"])
	require.EqualValues(t, 3, got["attempts"])
	require.NotNil(t, got["completedAt"])
	require.Equal(t, map[string]any{"n": 1.0}, got["payload"])

	status, got, _ = b.do(t, "GET", fmt.Sprintf("/events/%d", second), "")
	require.Equal(t, 200, status)
	require.Equal(t, "failed", got["state"], "a 400 is permanent")
	require.Equal(t, true, got["isFailed"])
	require.Equal(t, "HTTP 400: answer 400", got["exceptionMessage"])

	status, got, _ = b.do(t, "GET", fmt.Sprintf("/events/%d/attempts", first), "")
	require.Equal(t, 200, status)
	attempts := got["attempts"].([]any)
	require.Len(t, attempts, 3)
	for i, want := range []float64{503, 503, 200} {
		a := attempts[i].(map[string]any)
		require.EqualValues(t, i+1, a["number"])
		require.Equal(t, want, a["status"])
	}
	require.Equal(t, "HTTP 503: answer 503", attempts[0].(map[string]any)["error"])
	require.Equal(t, hook.ids[0], hook.ids[2], "one webhook-id across a task's attempts")
	require.Equal(t, `{"n": 1}`, hook.bodies[0], "the body is the payload, byte for byte")

	// A retry of a completed task is a conflict, final: no Retry-After, which would tell a client
	// (or a proxy) honouring it to send it again (it was sent with every 409, as for a key in
	// flight, which is worth retrying); of the failed one, it is delivered again.
	status, got, hdr := b.do(t, "POST", fmt.Sprintf("/events/%d/retry", first), "")
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, got["error"], "is completed, not failed")
	require.Empty(t, hdr.Values("Retry-After"), "a task that has not failed will not have failed a second later")
	status, _, hdr = b.do(t, "POST", fmt.Sprintf("/events/%d/retry", plainID(t, b)), "")
	require.Equal(t, http.StatusConflict, status)
	require.Empty(t, hdr.Values("Retry-After"), "an event that is not a task")
	status, got, _ = b.do(t, "POST", fmt.Sprintf("/events/%d/retry", second), "")
	require.Equal(t, 200, status, "%v", got)
	require.Equal(t, "in-place", got["placement"], "nothing after it had started")
	deliverAll(t, b.store)
	status, got, _ = b.do(t, "GET", fmt.Sprintf("/events/%d", second), "")
	require.Equal(t, 200, status)
	require.Equal(t, "completed", got["state"])

	status, got, _ = b.do(t, "GET", "/references/order-7/events", "")
	require.Equal(t, 200, status)
	events := got["events"].([]any)
	require.Len(t, events, 2)
	require.EqualValues(t, first, events[0].(map[string]any)["id"])
	require.EqualValues(t, second, events[1].(map[string]any)["id"])
	require.Nil(t, got["next"])
	status, got, _ = b.do(t, "GET", "/references/order-7/events?limit=1", "")
	require.Equal(t, 200, status)
	require.Len(t, got["events"].([]any), 1)
	require.EqualValues(t, first, got["next"])
	status, got, _ = b.do(t, "GET", fmt.Sprintf("/references/order-7/events?after=%d", first), "")
	require.Equal(t, 200, status)
	require.EqualValues(t, second, got["events"].([]any)[0].(map[string]any)["id"])

	for _, path := range []string{"/references/order-7/events?limit=0", "/references/order-7/events?limit=1001",
		"/references/order-7/events?after=x", "/references/order-7/events?sort=1", "/references/order-7/events?after=999999"} {
		status, got, _ = b.do(t, "GET", path, "")
		require.Equal(t, 400, status, "%s: %v", path, got)
	}
	status, _, _ = b.do(t, "GET", "/events/999999/attempts", "")
	require.Equal(t, 404, status)
	status, _, _ = b.do(t, "POST", "/events/999999/retry", "")
	require.Equal(t, 404, status)
	// A plain event is not a task: its retry is a 409 (docs/api.md, openapi.yaml), its attempts a 404.
	status, plain, _ := b.do(t, "POST", "/events", "")
	require.Equal(t, 201, status)
	plainID := int64(plain["id"].(float64))
	status, got, _ = b.do(t, "POST", fmt.Sprintf("/events/%d/retry", plainID), "")
	require.Equal(t, 409, status, "%v", got)
	require.Equal(t, fmt.Sprintf("event %d is not a task: only a failed task can be retried", plainID), got["error"])
	status, _, _ = b.do(t, "GET", fmt.Sprintf("/events/%d/attempts", plainID), "")
	require.Equal(t, 404, status)
}

// A failed task whose reference went on (a later task was delivered) is retried at the end of its
// reference's queue: after every task open now.
func TestRetryAfterLaterTasksStartedGoesToTheEnd(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	hook := &hookRecorder{status: []int{400, 200}}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)
	first := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 1, "referenceId": "r"}`)
	createTask(t, b, `{"url": "`+recv.URL+`", "payload": 2, "referenceId": "r"}`)
	deliverAll(t, b.store)
	third := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 3, "referenceId": "r"}`)
	status, got, _ := b.do(t, "POST", fmt.Sprintf("/events/%d/retry", first), "")
	require.Equal(t, 200, status, "%v", got)
	require.Equal(t, "end", got["placement"])
	deliverAll(t, b.store)
	require.Equal(t, []string{"1", "2", "3", "1"}, hook.bodies, "the retried task after the one open when it was retried")
	_, got, _ = b.do(t, "GET", "/references/r/events", "")
	var order []int64
	for _, e := range got["events"].([]any) {
		order = append(order, int64(e.(map[string]any)["id"].(float64)))
	}
	require.Equal(t, third, order[1], "listed in delivery order: the retried task last")
	require.Equal(t, first, order[2])
	n, err := b.store.Events.Count(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
}

// plainID creates a plain event and returns its id.
func plainID(t *testing.T, b *testBundle) int64 {
	t.Helper()
	status, created, _ := b.do(t, "POST", "/events", "")
	require.Equal(t, http.StatusCreated, status)
	return int64(created["id"].(float64))
}

// A number past float64's range, anywhere in a body, is a 400 naming its place, in every route that
// takes a body, and writes nothing: stored in a payload, it would break every answer that shows the
// task for a reader such as Go's encoding/json, and every receiver of its webhook. A keyed create
// refused for it does not spend its key: the same key with a readable body then creates.
func TestNumbersPastFloat64Refused(t *testing.T) {
	t.Parallel()
	b, _ := keyedServer(t, api.Idempotency{}, api.AsyncGroup{})
	long := "-" + strings.Repeat("9", 400)
	for _, tc := range []struct{ path, body, names string }{
		{"/events/async", `{"url": "https://example.com/x", "payload": {"n": 1e400}}`, "payload.n: the number 1e400 is outside"},
		{"/events/async", `{"url": "https://example.com/x", "payload": [{"n": -1e400}]}`, "payload[0].n: the number -1e400"},
		{"/events/async", `{"url": "https://example.com/x", "payload": ` + long + `}`, "payload: the number -999"},
		{"/events", `{"n": 1e400}`, "n: the number 1e400"},
		{"/events/1/retry", `{"n": 1e400}`, "n: the number 1e400"},
		{"/references/r/retry", `{"n": 1e400}`, "n: the number 1e400"},
	} {
		for _, key := range []string{"", "k-" + tc.path} {
			a := postKeyed(t, b.srv.URL, tc.path, key, tc.body)
			require.Equal(t, http.StatusBadRequest, a.status, "%s %.60s", tc.path, tc.body)
			var m map[string]string
			require.NoError(t, json.Unmarshal([]byte(a.body), &m), a.body)
			require.Contains(t, m["error"], tc.names, "%s %.60s", tc.path, tc.body)
		}
	}
	require.Zero(t, count(t, b), "no request above may write")
	require.Empty(t, b.queue.ids)

	a := postKeyed(t, b.srv.URL, "/events/async", "k-/events/async", `{"url": "https://example.com/x", "payload": {"n": 1e308}}`)
	require.Equal(t, http.StatusAccepted, a.status, a.body)
	require.Empty(t, a.replayed, "the refused body did not take the key")
	e, err := b.store.Events.Get(context.Background(), idOf(t, a.body))
	require.NoError(t, err)
	require.JSONEq(t, `{"n": 1e308}`, string(e.Task.Payload))
}

// A name given twice in one object of a task's payload is a 400 naming its place, and writes
// nothing: the payload is delivered byte for byte, and receivers disagree on which of the two values
// they read (Go and JavaScript the last, others the first or an error). A keyed create refused for
// it does not spend its key.
func TestAPayloadNameGivenTwiceIsRefused(t *testing.T) {
	t.Parallel()
	b, _ := keyedServer(t, api.Idempotency{}, api.AsyncGroup{})
	for _, path := range []string{"/events/async", "/events"} {
		for _, key := range []string{"", "k-" + path} {
			a := postKeyed(t, b.srv.URL, path, key, `{"url": "https://example.com/x", "payload": {"order": {"id": 1, "id": 2}}}`)
			require.Equal(t, http.StatusBadRequest, a.status, "%s %s", path, a.body)
			var m map[string]string
			require.NoError(t, json.Unmarshal([]byte(a.body), &m), a.body)
			require.Contains(t, m["error"], "payload.order.id: the name is given twice", a.body)
		}
	}
	require.Zero(t, count(t, b), "no request above may write")
	require.Empty(t, b.queue.ids)

	a := postKeyed(t, b.srv.URL, "/events/async", "k-/events/async", `{"url": "https://example.com/x", "payload": {"order": {"id": 1}, "id": 2}}`)
	require.Equal(t, http.StatusAccepted, a.status, a.body)
	require.Empty(t, a.replayed, "the refused body did not take the key")
}
