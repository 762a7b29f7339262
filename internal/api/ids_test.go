package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An id, a cursor or a limit too large for its type is "out of range", a 400 with a JSON message,
// on every route that takes one, in the path or the query; one that is not a number says so.
// Nothing is written.
func TestIDsOutOfRange(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	const huge = "99999999999999999999" // above 2^63-1
	for _, tc := range []struct{ method, path, says string }{
		{"GET", "/events/" + huge, "event id " + huge + " is out of range"},
		{"GET", "/events/9223372036854775808", "is out of range"}, // 2^63
		{"GET", "/events/" + huge + "/attempts", "event id " + huge + " is out of range"},
		{"POST", "/events/" + huge + "/retry", "event id " + huge + " is out of range"},
		{"GET", "/events?state=failed&before=" + huge, "before " + huge + " is out of range"},
		{"GET", "/events?state=failed&limit=" + huge, "limit " + huge + " is out of range"},
		{"GET", "/events?state=failed&limit=101", "limit 101 is out of range"},
		{"GET", "/events?state=failed&limit=0", "limit 0 is out of range"},
		{"GET", "/references/r/events?after=" + huge, "after " + huge + " is out of range"},
		{"GET", "/references/r/events?limit=" + huge, "limit " + huge + " is out of range"},
		{"GET", "/references/r/events?limit=1001", "limit 1001 is out of range"},
		{"GET", "/references/r/events?limit=0", "limit 0 is out of range"},

		// Not numbers, or not positive: said so, as before.
		{"GET", "/events/abc", "must be a positive integer"},
		{"GET", "/events/0", "must be a positive integer"},
		{"GET", "/events/-1", "must be a positive integer"},
		{"GET", "/events/-" + huge, "must be a positive integer"},
		{"GET", "/events/+1", "must be a positive integer"},
		{"GET", "/events/007", "must be a positive integer"},
		{"GET", "/events/1e3", "must be a positive integer"},
		{"GET", "/events/" + huge + "x/attempts", "must be a positive integer"},
		{"POST", "/events/x/retry", "must be a positive integer"},
		{"GET", "/events?state=failed&before=-5", "must be"},
		{"GET", "/events?state=failed&limit=ten", "limit must be an integer"},
		{"GET", "/references/r/events?after=0", "must be"},
		{"GET", "/references/r/events?limit=-" + huge, "limit must be"},
	} {
		status, body, _ := b.do(t, tc.method, tc.path, "")
		require.Equal(t, http.StatusBadRequest, status, "%s %s: %v", tc.method, tc.path, body)
		msg, _ := body["error"].(string)
		require.Contains(t, msg, tc.says, "%s %s", tc.method, tc.path)
		if strings.Contains(tc.says, "out of range") {
			require.NotContains(t, msg, "must be a positive integer", "%s %s", tc.method, tc.path)
		}
	}
	// The largest id is an id: one that does not exist.
	status, _, _ := b.do(t, "GET", "/events/9223372036854775807", "")
	require.Equal(t, http.StatusNotFound, status)
	status, body, _ := b.do(t, "GET", "/events?state=failed&before=9223372036854775807&limit=100", "")
	require.Equal(t, http.StatusOK, status, "%v", body)
	status, body, _ = b.do(t, "GET", "/references/r/events?after=9223372036854775807&limit=1000", "")
	require.Equal(t, http.StatusBadRequest, status, "%v", body)
	require.Contains(t, body["error"], "is not a task of this reference", "read as an id")
	n, err := b.store.Events.Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
}

// A listing's query that says two things (a parameter given twice) or cannot be read (a malformed
// escape) is a 400 naming it, as GET /events?state= answers, not a page read with the first value
// or with the default: ?limit=5&limit=500 was a page of 5, ?limit=%zz one of 100.
func TestListingQueriesThatSayTwoThingsAreRefused(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	for _, tc := range []struct{ path, says string }{
		{"/references/r/events?limit=5&limit=500", "limit given 2 times"},
		{"/references/r/events?after=1&after=2", "after given 2 times"},
		{"/references/r/events?limit=%zz", "malformed query string"},
		{"/references/r/events?%zz=1", "malformed query string"},
		{"/references/r/events?limit=1;after=2", "malformed query string"},
		{"/workers?active=true&active=false", "active given 2 times"},
		{"/workers?active=%zz", "malformed query string"},
	} {
		status, body, _ := b.do(t, "GET", tc.path, "")
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", tc.path, body)
		require.Contains(t, body["error"], tc.says, tc.path)
	}
	for _, ok := range []string{"/references/r/events?limit=5", "/references/r/events", "/workers?active=true", "/workers"} {
		status, body, _ := b.do(t, "GET", ok, "")
		require.Equal(t, http.StatusOK, status, "%s: %v", ok, body)
	}
}

// A route that takes no query parameter refuses one, naming it, before it reads or writes anything,
// where it was ignored: POST /events?async=true created a processed event, GET /agents?state=RUNNING
// listed every agent, GET /counters/u/t?limit=1 answered as without it. An empty query (? or ?&)
// is none.
func TestRoutesWithoutParametersRefuseOne(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	for _, tc := range []struct{ method, path, route string }{
		{"POST", "/events?async=true", "POST /events"},
		{"POST", "/events/async?referenceId=r", "POST /events/async"},
		{"GET", "/events/1?fields=id", "GET /events/{id}"},
		{"POST", "/events/1/retry?force=1", "POST /events/{id}/retry"},
		{"POST", "/references/r/retry?dryRun=true", "POST /references/{referenceId}/retry"},
		{"GET", "/overview?since=1h", "GET /overview"},
		{"GET", "/history?x=1&y=2", "GET /history"},
		{"GET", "/agents?state=RUNNING", "GET /agents"},
		{"GET", "/workers/w?active=true", "GET /workers/{workerId}"},
		{"GET", "/counters/u/t?limit=1", "GET /counters/{userId}/{entityType}"},
	} {
		status, body, _ := b.do(t, tc.method, tc.path, "")
		require.Equal(t, http.StatusBadRequest, status, "%s %s: %v", tc.method, tc.path, body)
		_, q, _ := strings.Cut(tc.path, "?")
		name, _, _ := strings.Cut(q, "=")
		require.Equal(t, `unknown query parameter "`+name+`": `+tc.route+" takes none", body["error"], "%s %s", tc.method, tc.path)
	}
	status, body, _ := b.do(t, "GET", "/agents?x=1&x=2", "")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body["error"], "x given 2 times")
	status, body, _ = b.do(t, "GET", "/agents?%zz", "")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body["error"], "malformed query string")
	n, err := b.store.Events.Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "no request above may write")
	require.Empty(t, b.queue.ids)

	for _, path := range []string{"/agents?", "/agents?&", "/overview?", "/history", "/openapi.yaml?v=1"} {
		resp, err := http.Get(b.srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
	status, body, _ = b.do(t, "POST", "/events?", "")
	require.Equal(t, http.StatusCreated, status, "%v", body)
}

// A query with several unknown parameters is answered the same every time, naming the first in name
// order, where it named whichever the map's iteration gave first.
func TestQueryErrorsNameTheFirstParameter(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	unknown := "&p7=1&p3=1&p5=1&p1=1&p6=1&p2=1&p4=1&p0=1"
	task := createTask(t, b, `{"url": "https://example.com/x"}`)
	for _, tc := range []struct{ path, says string }{
		{"/events?state=failed" + unknown, `unknown query parameter "p0": the listing takes`},
		{"/references/r/events?limit=5" + unknown, `unknown query parameter "p0": the listing takes`},
		{fmt.Sprintf("/events/%d/attempts?limit=5", task) + unknown, `unknown query parameter "p0": a task's attempts take`},
		{"/counters/u?limit=5" + unknown, `unknown query parameter "p0": a user's counts take`},
		{"/workers?active=true" + unknown, `unknown query parameter "p0": the listing takes active`},
		{"/agents?" + unknown[1:], `unknown query parameter "p0": GET /agents takes none`},
		{"/events?state=failed&limit=0&before=0", `before must be`},
	} {
		for range 10 {
			status, body, _ := b.do(t, "GET", tc.path, "")
			require.Equal(t, http.StatusBadRequest, status, "%s: %v", tc.path, body)
			require.Contains(t, body["error"], tc.says, tc.path)
		}
	}
}
