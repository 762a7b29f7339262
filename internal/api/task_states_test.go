package api_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stateOf reads a task's state through GET /events/{id}.
func stateOf(t *testing.T, b *testBundle, id int64) string {
	t.Helper()
	status, got, _ := b.do(t, "GET", fmt.Sprintf("/events/%d", id), "")
	require.Equal(t, http.StatusOK, status, "%v", got)
	return got["state"].(string)
}

// listed reads a state's listing (GET /events?state=) and returns the state each task of it says
// it is in, by id.
func listed(t *testing.T, b *testBundle, state string) map[int64]string {
	t.Helper()
	status, got, _ := b.do(t, "GET", "/events?kind=task&state="+state, "")
	require.Equal(t, http.StatusOK, status, "%v", got)
	out := map[int64]string{}
	for _, e := range got["events"].([]any) {
		m := e.(map[string]any)
		out[int64(m["id"].(float64))] = m["state"].(string)
	}
	return out
}

// referenceStates reads a reference's listing and returns each task's state, by id.
func referenceStates(t *testing.T, b *testBundle, ref string) map[int64]string {
	t.Helper()
	status, got, _ := b.do(t, "GET", "/references/"+ref+"/events", "")
	require.Equal(t, http.StatusOK, status, "%v", got)
	out := map[int64]string{}
	for _, e := range got["events"].([]any) {
		m := e.(map[string]any)
		out[int64(m["id"].(float64))] = m["state"].(string)
	}
	return out
}

// A task waiting behind its reference is `queued` in every read: GET /events/{id}, the listing of
// its state (where GET /events?state=queued finds it), the reference's listing, the overview's
// counts, and the answer of a retry that puts a task behind an open one. (Queued tasks are never
// packed: only folded, processed events are, so no packed read can show one.)
func TestAQueuedTaskIsQueuedInEveryRead(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	hook := &hookRecorder{status: []int{400, 200}}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)

	head := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 1, "referenceId": "q"}`)
	behind := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 2, "referenceId": "q"}`)

	require.Equal(t, "pending", stateOf(t, b, head))
	require.Equal(t, "queued", stateOf(t, b, behind), "GET /events/{id} of a task waiting behind its reference")
	require.Equal(t, map[int64]string{behind: "queued"}, listed(t, b, "queued"), "GET /events?state=queued")
	require.Equal(t, map[int64]string{head: "pending"}, listed(t, b, "pending"), "GET /events?state=pending")
	require.Equal(t, map[int64]string{head: "pending", behind: "queued"}, referenceStates(t, b, "q"))
	counts := overview(t, b)["events"].(map[string]any)
	require.EqualValues(t, 1, counts["queued"])
	require.EqualValues(t, 1, counts["pending"])

	// The head fails (400), the task behind it is delivered, and a third heads the reference, not
	// started. The first, retried now, goes to the end, behind that open task: the retry's answer
	// says queued, as every read does.
	deliverAll(t, b.store)
	require.Equal(t, "failed", stateOf(t, b, head))
	require.Equal(t, "completed", stateOf(t, b, behind))
	third := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 3, "referenceId": "q"}`)
	status, got, _ := b.do(t, "POST", fmt.Sprintf("/events/%d/retry", head), "")
	require.Equal(t, http.StatusOK, status, "%v", got)
	require.Equal(t, "end", got["placement"])
	require.Equal(t, "queued", got["state"], "retried behind the open task of its reference")
	require.Equal(t, "queued", stateOf(t, b, head))
	require.Equal(t, map[int64]string{head: "queued"}, listed(t, b, "queued"))
	require.Equal(t, map[int64]string{head: "queued", behind: "completed", third: "pending"}, referenceStates(t, b, "q"))
	counts = overview(t, b)["events"].(map[string]any)
	require.EqualValues(t, 1, counts["queued"])
	require.EqualValues(t, 1, counts["pending"])
}

// read200 reads path and returns its answer's body.
func read200(t *testing.T, b *testBundle, path string) map[string]any {
	t.Helper()
	status, got, _ := b.do(t, "GET", path, "")
	require.Equal(t, http.StatusOK, status, "%s: %v", path, got)
	return got
}

// listedTask finds task id in a listing's answer.
func listedTask(t *testing.T, page map[string]any, id int64) map[string]any {
	t.Helper()
	for _, e := range page["events"].([]any) {
		if m := e.(map[string]any); int64(m["id"].(float64)) == id {
			return m
		}
	}
	t.Fatalf("task %d not listed: %v", id, page)
	return nil
}

// A task delivered after failed attempts says how it ended: completed, with no exceptionMessage
// (and no next attempt); the errors are its attempts'. GET /events/{id}, the processed listing the
// console's events page shows, and both again once the task is packed into its page agree. A task
// failed for good keeps its exceptionMessage.
func TestACompletedTaskCarriesNoException(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	hook := &hookRecorder{status: []int{503, 200, 400}}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)
	done := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 1, "referenceId": "e"}`)
	failed := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 2, "referenceId": "e"}`)
	deliverAll(t, b.store)

	check := func(when string) map[string]any {
		t.Helper()
		got := read200(t, b, fmt.Sprintf("/events/%d", done))
		require.Equal(t, "completed", got["state"], when)
		require.EqualValues(t, 2, got["attempts"], when)
		require.Contains(t, got, "exceptionMessage", when)
		require.Nil(t, got["exceptionMessage"], "%s: a completed task carries no error: %v", when, got)
		require.Nil(t, got["nextAttemptAt"], "%s: nor a next attempt", when)
		listing := listedTask(t, read200(t, b, "/events?state=processed&kind=task"), done)
		require.Equal(t, got, listing, "%s: the console's processed list shows the task as GET /events/{id} does", when)
		attempts := read200(t, b, fmt.Sprintf("/events/%d/attempts", done))["attempts"].([]any)
		require.Len(t, attempts, 2, when)
		require.Equal(t, "HTTP 503: answer 503", attempts[0].(map[string]any)["error"], "%s: the error is the attempt's", when)
		require.Nil(t, attempts[1].(map[string]any)["error"], when)
		return got
	}
	before := check("before the pack")
	var lastError sql.NullString
	require.NoError(t, b.store.DB.Pool().QueryRow("SELECT last_error FROM events WHERE id = ?", done).Scan(&lastError))
	require.False(t, lastError.Valid, "the stored row, which the pack copies into the page, keeps no error either: %q", lastError.String)
	f := read200(t, b, fmt.Sprintf("/events/%d", failed))
	require.Equal(t, "failed", f["state"])
	require.Equal(t, "HTTP 400: answer 400", f["exceptionMessage"], "a failed task says why")
	require.Nil(t, f["nextAttemptAt"], "a failed task has no next attempt")
	require.Equal(t, f, listedTask(t, read200(t, b, "/events?state=failed&kind=task"), failed))

	// Packed: the task's row leaves `events` for its page, and reads the same.
	for {
		n, err := b.store.Events.FoldSettled(context.Background(), 5000)
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	_, err := b.store.DB.Pool().Exec("UPDATE status SET id = id + 10000") // its unit far behind the id counter
	require.NoError(t, err)
	_, packed, err := b.store.Pages.PackPages(context.Background(), 100, time.Minute)
	require.NoError(t, err)
	require.Positive(t, packed)
	var inEvents int
	require.NoError(t, b.store.DB.Pool().QueryRow("SELECT COUNT(*) FROM events WHERE id = ?", done).Scan(&inEvents))
	require.Zero(t, inEvents, "the completed task is packed")
	require.Equal(t, before, check("after the pack"))
}

// attemptsOf reads a task's attempts (GET /events/{id}/attempts): their numbers and statuses.
func attemptsOf(t *testing.T, b *testBundle, id int64) (numbers []int, statuses []int) {
	t.Helper()
	for _, a := range read200(t, b, fmt.Sprintf("/events/%d/attempts", id))["attempts"].([]any) {
		m := a.(map[string]any)
		numbers = append(numbers, int(m["number"].(float64)))
		statuses = append(statuses, int(m["status"].(float64)))
	}
	return numbers, statuses
}

// A task's attempts are numbered across its whole life: a manual retry (of the task, or of its
// reference) continues the numbering, and the task's attempts field counts them all, while each
// retry still gets a fresh budget of maxRetries retries. maxRetries 1 against a receiver that
// answers 503 four times: two attempts, failed; retried, two more (3 and 4: the budget is fresh),
// failed; its reference retried, a fifth, delivered.
func TestAttemptsAreNumberedAcrossManualRetries(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	hook := &hookRecorder{status: []int{503, 503, 503, 503, 200}}
	recv := httptest.NewServer(hook)
	t.Cleanup(recv.Close)
	id := createTask(t, b, `{"url": "`+recv.URL+`", "payload": 1, "referenceId": "n", "maxRetries": 1}`)
	check := func(state string, n int) {
		t.Helper()
		got := read200(t, b, fmt.Sprintf("/events/%d", id))
		require.Equal(t, state, got["state"])
		require.EqualValues(t, n, got["attempts"], "the attempts field counts every attempt: %v", got)
		numbers, statuses := attemptsOf(t, b, id)
		want := make([]int, n)
		for i := range want {
			want[i] = i + 1
		}
		require.Equal(t, want, numbers, "numbered 1..%d, no repeat", n)
		require.Equal(t, []int{503, 503, 503, 503, 200}[:n], statuses)
		listing := referenceStates(t, b, "n")
		require.Equal(t, state, listing[id])
		ref := read200(t, b, "/references/n/events")["events"].([]any)[0].(map[string]any)
		require.EqualValues(t, n, ref["attempts"], "the reference's listing agrees")
	}

	deliverAll(t, b.store)
	check("failed", 2)

	status, got, _ := b.do(t, "POST", fmt.Sprintf("/events/%d/retry", id), "")
	require.Equal(t, http.StatusOK, status, "%v", got)
	check("pending", 2)
	deliverAll(t, b.store)
	check("failed", 4)

	status, got, _ = b.do(t, "POST", "/references/n/retry", "")
	require.Equal(t, http.StatusOK, status, "%v", got)
	require.Equal(t, []any{float64(id)}, got["retried"])
	check("pending", 4)
	deliverAll(t, b.store)
	check("completed", 5)
	require.Len(t, hook.bodies, 5, "the receiver saw five attempts")
}
