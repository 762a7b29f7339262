package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// FuzzAPI throws arbitrary requests at the handler, on a real database, and the same request at a
// handler whose database is unreachable. Invariants:
//
//   - a request is answered 2xx if and only if it is one of the four documented requests
//     (documented, below, says which independently of the handler); anything else gets a 4xx with
//     a JSON error and writes nothing (no event, no queue message); nothing is ever a 5xx;
//   - a 201 wrote exactly one event, the one answered: processed, by api, once, with the value
//     answered; a 202 wrote exactly one pending event without a value, and one message naming it;
//   - with the database down every answer is a 4xx or a 503 with Retry-After, never a 500, and a
//     request that succeeds with the database up is a 503 without it.
//
// `go test` runs the seeds below and the corpus in testdata/fuzz/FuzzAPI (malformed JSON, JSON that
// is not an object, huge bodies, negative, zero and overflowing ids, SQL metacharacters, unknown
// routes and methods); `go test -run '^$' -fuzz FuzzAPI -fuzztime 60s ./internal/api` searches for more.
func FuzzAPI(f *testing.F) {
	for _, s := range []struct{ method, path, body string }{
		{"POST", "/events", ""},
		{"POST", "/events", "{}"},
		{"POST", "/events/async", " { } "},
		{"POST", "/events/async", "\t\r\n"},
		{"GET", "/events", ""},
		{"GET", "/events/1", ""},
		{"GET", "/openapi.yaml", ""},
		{"POST", "/events", `{"value":"x"}`},
		{"POST", "/events", "{"},
		{"POST", "/events", "null"},
		{"POST", "/events/async", " null\n"},
		{"POST", "/events", "[]"},
		{"POST", "/events", `"x"`},
		{"POST", "/events", "1"},
		{"POST", "/events", "\f"},
		{"POST", "/events", strings.Repeat("x", api.DefaultMaxBodyBytes+1)}, // one byte over
		{"POST", "/events/async", `{"a":"` + strings.Repeat("\u00e9", 1<<20) + `"}`}, // 2 MB
		{"POST", "/events", `{"id":1} {"id":2}`},
		{"GET", "/events/-1", ""},
		{"GET", "/events/0", ""},
		{"GET", "/events/9223372036854775808", ""},
		{"GET", "/events/1' OR '1'='1", ""},
		{"GET", "/events/1;DROP TABLE events", ""},
		{"DELETE", "/events/1", ""},
		{"BREW", "/events", ""},
		{"", "", ""},
		{"GET", "/../events", ""},
		{"POST", "/events/async/", ""},
	} {
		f.Add(s.method, s.path, s.body)
	}
	store := wire.NewStores(testdb.Core(f, mysql.Config{}, 4))
	queue := &recordingQueue{}
	srv := &api.Server{Stores: store.API(), Queue: queue}
	downQueue := &recordingQueue{}
	down := &api.Server{Stores: wire.NewStores(testdb.UnreachableCore(f)).API(), Queue: downQueue, Logger: slog.New(slog.DiscardHandler)}
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, method, path, body string) {
		want := documented(method, path, body)
		if want == document { // not JSON: the document, whatever the database does
			rec := httptest.NewRecorder()
			openapitest.Handler(t, srv).ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
			require.Equal(t, http.StatusOK, rec.Code)
			require.Equal(t, exactlyonce.OpenAPI, rec.Body.Bytes())
			return
		}
		before, err := store.Events.Count(ctx)
		require.NoError(t, err)
		queue.mu.Lock()
		sentBefore, messagesBefore := len(queue.ids), queue.messages
		queue.mu.Unlock()

		status, answer := serve(t, srv, method, path, body)

		after, err := store.Events.Count(ctx)
		require.NoError(t, err)
		queue.mu.Lock()
		sent, messages := append([]int64(nil), queue.ids[sentBefore:]...), queue.messages-messagesBefore
		queue.mu.Unlock()

		require.Less(t, status, 500, "%q %q %.40q: never a 5xx: %v", method, path, body, answer)
		switch {
		case want == notDocumented:
			require.True(t, status >= 400, "%q %q %.40q: not a documented request, answered %d", method, path, body, status)
		case want == created:
			require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, status, "%q %q %.40q: a documented create: %v", method, path, body, answer)
		default:
			require.Contains(t, []int{http.StatusOK, http.StatusNotFound}, status, "%q %q: a documented read: %v", method, path, answer)
		}
		switch {
		case status >= 400:
			msg, ok := answer["error"].(string)
			require.True(t, ok && msg != "", "%q %q: a 4xx carries a JSON error: %v", method, path, answer)
			require.Equal(t, before, after, "%q %q %.40q: a refused request writes nothing", method, path, body)
			require.Zero(t, messages, "%q %q: a refused request sends nothing", method, path)
		case status == http.StatusCreated:
			require.Equal(t, "/events", path)
			require.Equal(t, before+1, after, "a create writes one event")
			require.Zero(t, messages)
			e, err := store.Events.Get(ctx, answerID(t, answer))
			require.NoError(t, err, "the event answered is the one stored")
			require.Equal(t, exactlyonce.Processed, e.State)
			require.NotNil(t, e.Value)
			require.Equal(t, *e.Value, answer["value"], "the value answered is the value stored")
			require.Equal(t, exactlyonce.ByAPI, e.ProcessedBy)
			require.Equal(t, 1, e.ProcessCount)
		case status == http.StatusAccepted:
			require.Equal(t, "/events/async", path)
			require.Equal(t, before+1, after, "an async create writes one event")
			id := answerID(t, answer)
			e, err := store.Events.Get(ctx, id)
			require.NoError(t, err, "the event answered is the one stored")
			require.Equal(t, exactlyonce.Pending, e.State)
			require.Nil(t, e.Value)
			require.Zero(t, e.ProcessCount)
			require.Equal(t, 1, messages, "and queues one message")
			require.Equal(t, []int64{id}, sent, "naming it")
		default:
			require.Equal(t, before, after, "a read writes nothing")
			require.Zero(t, messages)
		}

		// The same request with the database down.
		downStatus, downAnswer := serve(t, down, method, path, body)
		require.True(t, downStatus < 500 || downStatus == http.StatusServiceUnavailable,
			"%q %q %.40q: with the database down a 4xx or a 503, got %d: %v", method, path, body, downStatus, downAnswer)
		msg, ok := downAnswer["error"].(string)
		if status < 300 {
			require.Equal(t, http.StatusServiceUnavailable, downStatus, "%q %q: it needs the database", method, path)
		}
		if downStatus >= 400 {
			require.True(t, ok && msg != "", "%q %q: a JSON error: %v", method, path, downAnswer)
		}
		downQueue.mu.Lock()
		require.Zero(t, downQueue.messages, "nothing is sent for what could not be stored")
		downQueue.mu.Unlock()
	})
}

// What documented says a request is.
const (
	notDocumented = iota
	created       // POST /events or /events/async with no body or an empty JSON object
	read          // GET /events or GET /events/{a positive int64}
	document      // GET /openapi.yaml
)

// emptyBody is what the README allows a create's body to be: nothing, or {}, with JSON whitespace
// around and inside.
var emptyBody = regexp.MustCompile(`^[ \t\r\n]*(\{[ \t\r\n]*\})?[ \t\r\n]*$`)

// documented says, from the README's API section and independently of the handler, whether a
// request is one of the four documented ones. A body's size limit is left to the handler.
func documented(method, path, body string) int {
	switch {
	case method == "POST" && (path == "/events" || path == "/events/async") && emptyBody.MatchString(body) && len(body) <= api.DefaultMaxBodyBytes:
		return created
	case method == "GET" && path == "/openapi.yaml":
		return document
	case method == "GET" && path == "/events":
		return read
	case method == "GET" && strings.HasPrefix(path, "/events/"):
		raw := strings.TrimPrefix(path, "/events/")
		id, err := strconv.ParseInt(raw, 10, 64)
		if err == nil && id > 0 && raw[0] != '0' && raw[0] != '+' {
			return read
		}
	}
	return notDocumented
}

// serve hands the request to h as a server would, built by hand so that even what net/http would
// refuse to parse reaches the handler, and returns the status and the JSON answer.
func serve(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := (&http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{},
		Body: http.NoBody, Host: "example.com", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(context.Background())
	if body != "" {
		req.Body = httpBody(body)
		req.ContentLength = int64(len(body))
	}
	rec := httptest.NewRecorder()
	openapitest.Handler(t, h).ServeHTTP(rec, req)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var answer map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &answer), "%q %q: JSON answer: %q", method, path, rec.Body)
	if rec.Code == http.StatusServiceUnavailable {
		require.Equal(t, "1", rec.Header().Get("Retry-After"))
	}
	return rec.Code, answer
}

func answerID(t *testing.T, answer map[string]any) int64 {
	t.Helper()
	f, ok := answer["id"].(float64)
	require.True(t, ok && f > 0 && f == float64(int64(f)), "an id in %v", answer)
	return int64(f)
}

func httpBody(s string) *bodyReader { return &bodyReader{strings.NewReader(s)} }

type bodyReader struct{ *strings.Reader }

func (bodyReader) Close() error { return nil }
