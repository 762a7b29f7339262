package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// FuzzAPI throws arbitrary requests at the handler, on a real database. Invariant: anything but
// one of the four documented requests is answered with a 4xx and a JSON error, and writes
// nothing (no event, no queue message); nothing is ever a 5xx; a documented create writes exactly
// one event (and, async, one message).
//
// `go test` runs the seeds below and the corpus in testdata/fuzz/FuzzAPI (malformed JSON, huge
// bodies, negative, zero and overflowing ids, SQL metacharacters, unknown routes and methods);
// `go test -run '^$' -fuzz FuzzAPI -fuzztime 60s ./internal/api` searches for more.
func FuzzAPI(f *testing.F) {
	for _, s := range []struct{ method, path, body string }{
		{"POST", "/events", ""},
		{"POST", "/events", "{}"},
		{"POST", "/events/async", " { } "},
		{"GET", "/events", ""},
		{"GET", "/events/1", ""},
		{"POST", "/events", `{"value":"x"}`},
		{"POST", "/events", "{"},
		{"POST", "/events", "null"},
		{"POST", "/events", strings.Repeat("x", api.DefaultMaxBodyBytes+1)},          // one byte over
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
	store := testdb.Store(f, mysql.StoreConfig{}, 4)
	queue := &recordingQueue{}
	srv := &api.Server{Store: store, Queue: queue}
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, method, path, body string) {
		// The request as a server would hand it over, built by hand so that even what net/http
		// would refuse to parse reaches the handler.
		req := (&http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{},
			Body: http.NoBody, Host: "example.com", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(ctx)
		if body != "" {
			req.Body = httpBody(body)
			req.ContentLength = int64(len(body))
		}
		before, err := store.Count(ctx)
		require.NoError(t, err)
		queue.mu.Lock()
		sentBefore := len(queue.ids)
		queue.mu.Unlock()

		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)

		status := rec.Code
		require.Less(t, status, 500, "%q %q: never a 5xx: %s", method, path, rec.Body)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		var answer map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &answer), "%q %q: JSON answer: %q", method, path, rec.Body)

		after, err := store.Count(ctx)
		require.NoError(t, err)
		queue.mu.Lock()
		sent := len(queue.ids) - sentBefore
		queue.mu.Unlock()

		switch {
		case status >= 400:
			msg, ok := answer["error"].(string)
			require.True(t, ok && msg != "", "%q %q: a 4xx carries a JSON error: %v", method, path, answer)
			require.Equal(t, before, after, "%q %q: a refused request writes nothing", method, path)
			require.Zero(t, sent, "%q %q: a refused request sends nothing", method, path)
		case status == http.StatusCreated:
			require.Equal(t, "POST", method)
			require.Equal(t, "/events", path)
			require.Equal(t, before+1, after, "a create writes one event")
			require.Zero(t, sent)
		case status == http.StatusAccepted:
			require.Equal(t, "POST", method)
			require.Equal(t, "/events/async", path)
			require.Equal(t, before+1, after, "an async create writes one event")
			require.Equal(t, 1, sent, "and queues one message")
		default:
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, "GET", method)
			require.Equal(t, before, after, "a read writes nothing")
			require.Zero(t, sent)
		}
	})
}

func httpBody(s string) *bodyReader { return &bodyReader{strings.NewReader(s)} }

type bodyReader struct{ *strings.Reader }

func (bodyReader) Close() error { return nil }
