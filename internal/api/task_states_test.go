package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

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
