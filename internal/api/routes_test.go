package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/stretchr/testify/require"
)

// fakeStore answers without a database, so that routing can be tested on hundreds of requests: it
// knows event 1 only, and counts 7 events.
type fakeStore struct {
	mu      sync.Mutex
	created int64
}

func (s *fakeStore) CreateProcessed(_ context.Context, value string) (exactlyonce.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created++
	return exactlyonce.Event{ID: 100 + s.created, Value: &value, State: exactlyonce.Processed, ProcessCount: 1}, nil
}

func (s *fakeStore) CreatePendingBatch(_ context.Context, n int) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int64, n)
	for i := range ids {
		s.created++
		ids[i] = 100 + s.created
	}
	return ids, nil
}

func (s *fakeStore) Get(_ context.Context, id int64) (exactlyonce.Event, error) {
	if id != 1 {
		return exactlyonce.Event{}, exactlyonce.Errorf(exactlyonce.ENOTFOUND, "event %d not found", id)
	}
	return exactlyonce.Event{ID: 1, State: exactlyonce.Pending}, nil
}

func (s *fakeStore) Count(context.Context) (int64, error) { return 7, nil }

// routeMethods are the methods every path of the routing table is tried with: the API's own, the
// ones a mux treats specially (HEAD as GET, CONNECT uncleaned, OPTIONS), and made-up ones.
var routeMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "BREW", "get", "post"}

// routeCase is what the API answers on one path, for every method of routeMethods.
type routeCase struct {
	// target is the request-target as it comes on the wire, parsed as a server does; or, when it
	// starts with "path:", the rest is the request's URL.Path, for paths no request line yields.
	target string
	// allow is the methods the path has, as the Allow header of a 405 lists them; "" means no
	// route: every method is answered 404 {"error": "no route for METHOD PATH"}.
	allow string
	// answers holds the status and JSON body expected for each method of allow; the other methods
	// are answered 405 with Allow and {"error": "method not allowed; use ALLOW"}.
	answers map[string]string
}

// longID is an id too long to echo whole: messages cut caller-supplied text at 64 bytes.
var longID = strings.Repeat("9", 70)

// routeCases is the routing behaviour of the API, recorded from the hand-written switch it had
// before it routed with http.ServeMux, and kept since: an exact match of URL.Path (decoded) on
// /events, /events/async or /events/{one segment, possibly empty or a dot}; a JSON 404 for
// anything else, and a JSON 405 with Allow for a known path and another method. Never a redirect
// (ServeMux's cleaning of dots and double slashes, and its /tree -> /tree/ redirect, do not
// apply) and HEAD is not GET.
var routeCases = []routeCase{
	{target: "/events", allow: "GET, POST", answers: map[string]string{
		"GET": `200 {"count":7}`, "POST": `201 {"id":101,"value":"v","state":"processed","processCount":1}`}},
	{target: "/events?", allow: "GET, POST", answers: map[string]string{
		"GET": `200 {"count":7}`, "POST": `201 {"id":101,"value":"v","state":"processed","processCount":1}`}},
	// A query string makes GET /events a listing (console.go), whose parameters are checked; POST
	// /events takes none (noQuery).
	{target: "/events?x=1", allow: "GET, POST", answers: map[string]string{
		"GET":  `400 {"error":"unknown query parameter \"x\": the listing takes state, kind, before and limit"}`,
		"POST": `400 {"error":"unknown query parameter \"x\": POST /events takes none"}`}},
	{target: "/overview", allow: "GET", answers: map[string]string{"GET": `500 {"error":"the operators' reads are not available"}`}},
	{target: "/references/r/retry", allow: "POST", answers: map[string]string{"POST": `500 {"error":"the operators' reads are not available"}`}},
	{target: "/references/%2F/retry"},
	{target: "/events/async", allow: "POST", answers: map[string]string{"POST": `202 {"id":101}`}},
	{target: "/events/%61sync", allow: "POST", answers: map[string]string{"POST": `202 {"id":101}`}},
	{target: "/events%2Fasync", allow: "POST", answers: map[string]string{"POST": `202 {"id":101}`}},
	{target: "/events/1", allow: "GET", answers: map[string]string{"GET": `200 {"id":1,"value":null,"state":"pending","processCount":0}`}},
	{target: "/events/%31", allow: "GET", answers: map[string]string{"GET": `200 {"id":1,"value":null,"state":"pending","processCount":0}`}},
	// The query is not the path (its slash routes nowhere else), and GET /events/{id} takes none.
	{target: "/events/1?x=/y", allow: "GET", answers: map[string]string{"GET": `400 {"error":"unknown query parameter \"x\": GET /events/{id} takes none"}`}},
	{target: "/events/2", allow: "GET", answers: map[string]string{"GET": `404 {"error":"event 2 not found"}`}},
	{target: "/events/9223372036854775807", allow: "GET", answers: map[string]string{"GET": `404 {"error":"event 9223372036854775807 not found"}`}},
	{target: "/events/", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"\""}`}},
	{target: "/events/.", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \".\""}`}},
	{target: "/events/..", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"..\""}`}},
	{target: "/events/%2e%2E", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"..\""}`}},
	{target: "/events/0", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"0\""}`}},
	{target: "/events/007", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"007\""}`}},
	{target: "/events/-1", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"-1\""}`}},
	{target: "/events/+1", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"+1\""}`}},
	{target: "/events/1.5", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"1.5\""}`}},
	{target: "/events/9223372036854775808", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id 9223372036854775808 is out of range: an id is at most 9223372036854775807"}`}},
	{target: "/events/" + longID, allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id ` + longID[:64] + `... is out of range: an id is at most 9223372036854775807"}`}},
	{target: "/events/abc", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"abc\""}`}},
	{target: "/events/ASYNC", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"ASYNC\""}`}},
	{target: "/events/%00", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"\\x00\""}`}},
	{target: "/events/%ff", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"?\""}`}},
	{target: "/events/%20", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \" \""}`}},
	{target: "/events/a%3Fb", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"a?b\""}`}},
	{target: "/events/%25", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"%\""}`}},
	{target: "/events/1'%20OR%20'1'='1", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"1' OR '1'='1\""}`}},
	{target: "/events/{id}", allow: "GET", answers: map[string]string{"GET": `400 {"error":"event id must be a positive integer, got \"{id}\""}`}},

	{target: "/"},
	{target: "*"},
	{target: "/x"},
	{target: "/EVENTS"},
	{target: "/events.json"},
	{target: "/eventsx"},
	{target: "/events/async/"},
	{target: "/events/async/x"},
	{target: "/events/1/"},
	{target: "/events/1/x"},
	{target: "/events/1%2Fx"},
	{target: "/events/async%2F"},
	{target: "//events"},
	{target: "//events/1"},
	{target: "/events//"},
	{target: "/events//1"},
	{target: "/events/1//"},
	{target: "/./events"},
	{target: "/../events"},
	{target: "/events/./"},
	{target: "/events/./1"},
	{target: "/events/../events"},
	{target: "/events/1/.."},
	{target: "/events/%2E/1"},
	{target: "/x/../events"},
	{target: "/" + strings.Repeat("x", 100)},
	{target: "path:"},
	{target: "path:events"},
	{target: "path:events/1"},
	{target: "path:*"},
	{target: "path:/events/a/b"},
}

// request builds the request a server hands over for c and method.
func (c routeCase) request(t *testing.T, method string) *http.Request {
	t.Helper()
	if path, ok := strings.CutPrefix(c.target, "path:"); ok {
		return &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{},
			Body: http.NoBody, Host: "example.com", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	}
	// http.ReadRequest, as a server does: httptest.NewRequest refuses some targets a server takes.
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(
		method + " " + c.target + " HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n")))
	require.NoError(t, err, "%s %s", method, c.target)
	return r
}

// TestRoutes runs every routeCase with every method, and checks the status, the body, the Allow
// header of a 405, and that every answer is JSON and none a redirect.
func TestRoutes(t *testing.T) {
	t.Parallel()
	for _, c := range routeCases {
		for _, method := range routeMethods {
			r := c.request(t, method)
			// A fresh server each time, so that the ids in the answers do not depend on the order.
			srv := &api.Server{Stores: api.Stores{Events: &fakeStore{}}, NewValue: func() string { return "v" }}
			rec := httptest.NewRecorder()
			openapitest.Handler(t, srv).ServeHTTP(rec, r)

			what := fmt.Sprintf("%s %s", method, c.target)
			want, allowed := c.answers[method]
			switch {
			case c.allow == "":
				msg, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("no route for %s %s", method, cut(r.URL.Path))})
				want = "404 " + string(msg)
			case !allowed:
				want = `405 {"error":"method not allowed; use ` + c.allow + `"}`
			}
			require.Equal(t, want, fmt.Sprintf("%d %s", rec.Code, strings.TrimSuffix(rec.Body.String(), "\n")), what)
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"), what)
			require.Empty(t, rec.Header().Get("Location"), what)
			if rec.Code == http.StatusMethodNotAllowed {
				require.Equal(t, c.allow, rec.Header().Get("Allow"), what)
			} else {
				require.Empty(t, rec.Header().Get("Allow"), what)
			}
		}
	}
}

// cut is what the API echoes of a path in a 404: ASCII paths cut at 64 bytes.
func cut(path string) string {
	if len(path) > 64 {
		return path[:64] + "..."
	}
	return path
}
