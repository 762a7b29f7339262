package api_test

import (
	"context"
	"encoding/binary"
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
	"github.com/exactlyonce/exactlyonce/internal/mysql/keystore"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

type keyedAnswer struct {
	status   int
	body     string
	replayed string
	retry    string
}

func postKeyed(t *testing.T, url, path, key, body string) keyedAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set(api.KeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return keyedAnswer{resp.StatusCode, string(b), resp.Header.Get(api.ReplayedHeader), resp.Header.Get("Retry-After")}
}

func idOf(t *testing.T, body string) int64 {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	return int64(m["id"].(float64))
}

func keyedServer(t *testing.T, idem api.Idempotency, group api.AsyncGroup) (*testBundle, *api.Server) {
	t.Helper()
	b := &testBundle{store: wire.NewStores(testdb.Core(t, mysql.Config{}, 8)), queue: &recordingQueue{}}
	srv := &api.Server{Stores: b.store.API(), Queue: b.queue, Idempotency: idem, AsyncGroup: group}
	b.srv = openapitest.NewServer(t, srv)
	t.Cleanup(b.srv.Close)
	return b, srv
}

func count(t *testing.T, b *testBundle) int64 {
	t.Helper()
	n, err := b.store.Events.Count(context.Background())
	require.NoError(t, err)
	return n
}

// Invariant: 32 concurrent identical requests with one key store one event and send one message,
// and all 32 get the same answer (one original, 31 replays), on both creates, grouped (a process
// serving many requests) and inline (Lambda).
func TestConcurrentRequestsWithOneKeyStoreOneEvent(t *testing.T) {
	t.Parallel()
	for name, group := range map[string]api.AsyncGroup{"grouped": {}, "inline": {Inline: true}} {
		for _, path := range []string{"/events", "/events/async"} {
			t.Run(name+" "+path, func(t *testing.T) {
				t.Parallel()
				b, _ := keyedServer(t, api.Idempotency{Wait: time.Minute}, group)
				answers := make([]keyedAnswer, 32)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range answers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						answers[i] = postKeyed(t, b.srv.URL, path, "same-key", "{}")
					}()
				}
				close(start)
				wg.Wait()
				originals := 0
				for _, a := range answers {
					require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, a.status, a.body)
					require.Equal(t, answers[0].body, a.body, "every answer the same, byte for byte")
					if a.replayed == "" {
						originals++
					} else {
						require.Equal(t, "true", a.replayed)
					}
				}
				require.Equal(t, 1, originals, "one answer is the original, the others replays")
				require.EqualValues(t, 1, count(t, b), "one event")
				if path == "/events/async" {
					b.queue.mu.Lock()
					defer b.queue.mu.Unlock()
					require.Equal(t, []int64{idOf(t, answers[0].body)}, b.queue.ids, "one message, naming the event")
				}
			})
		}
	}
}

// Invariant: many concurrent clients, each key sent by three of them and every key in one of three
// buckets, store one event per key and get one answer per key (one original, the others replays),
// while the process's keyed groups run their statements two at a time (keyedShareAt: 64 clients
// keep more than 8 creates waiting), so that two groups lock the same buckets at once.
func TestConcurrentGroupsWithKeysOfSharedBucketsStoreOneEventPerKey(t *testing.T) {
	t.Parallel()
	b, _ := keyedServer(t, api.Idempotency{Wait: time.Minute}, api.AsyncGroup{})
	const perKey, clients = 3, 64
	var keys []string
	for i := 0; len(keys) < 3*(clients/perKey/3+1); i++ {
		k := fmt.Sprint("shared-", i)
		h := exactlyonce.KeyHash("", k)
		if binary.BigEndian.Uint32(h[:4])%keystore.KeyBuckets < 3 {
			keys = append(keys, k)
		}
	}
	total := 0
	for round := range 3 {
		answers := map[string][]keyedAnswer{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range clients {
			key := fmt.Sprintf("%s-r%d", keys[(i/perKey)%len(keys)], round)
			wg.Go(func() {
				<-start
				a := postKeyed(t, b.srv.URL, "/events", key, "")
				mu.Lock()
				answers[key] = append(answers[key], a)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		for key, as := range answers {
			originals := 0
			for _, a := range as {
				require.Equal(t, http.StatusCreated, a.status, a.body)
				require.Equal(t, as[0].body, a.body, "%s: every answer the same, byte for byte", key)
				if a.replayed == "" {
					originals++
				}
			}
			require.Equal(t, 1, originals, "%s: one original", key)
		}
		total += len(answers)
		require.EqualValues(t, total, count(t, b), "one event per key")
	}
}

// Invariant: a repeat after success gets the stored answer with Idempotent-Replayed and stores
// nothing; the same key with another body or path is a 422 that stores nothing; another key is
// another event; a request without a key is unaffected.
func TestRepeatAndMismatch(t *testing.T) {
	t.Parallel()
	b, _ := keyedServer(t, api.Idempotency{}, api.AsyncGroup{})
	first := postKeyed(t, b.srv.URL, "/events", "k1", "")
	require.Equal(t, http.StatusCreated, first.status, first.body)
	require.Empty(t, first.replayed)
	again := postKeyed(t, b.srv.URL, "/events", "k1", "")
	require.Equal(t, first.status, again.status)
	require.Equal(t, first.body, again.body, "byte for byte")
	require.Equal(t, "true", again.replayed)
	quoted := postKeyed(t, b.srv.URL, "/events", `"k1"`, "")
	require.Equal(t, first.body, quoted.body, "the structured-field string form names the same key")

	for _, other := range []struct{ path, body string }{{"/events", "{}"}, {"/events/async", ""}} {
		m := postKeyed(t, b.srv.URL, other.path, "k1", other.body)
		require.Equal(t, http.StatusUnprocessableEntity, m.status, m.body)
		require.Contains(t, m.body, api.KeyHeader)
	}
	require.EqualValues(t, 1, count(t, b), "repeats and mismatches store nothing")

	async := postKeyed(t, b.srv.URL, "/events/async", "k2", "{}")
	require.Equal(t, http.StatusAccepted, async.status)
	require.Equal(t, async.body, postKeyed(t, b.srv.URL, "/events/async", "k2", "{}").body)
	plain := postKeyed(t, b.srv.URL, "/events", "", "")
	require.Equal(t, http.StatusCreated, plain.status)
	require.EqualValues(t, 3, count(t, b))
	b.queue.mu.Lock()
	defer b.queue.mu.Unlock()
	require.Equal(t, []int64{idOf(t, async.body)}, b.queue.ids, "the replay sent no message")
}

// Invariant: after the TTL a key is fresh: its repeat is a new event.
func TestRepeatAfterTheTTL(t *testing.T) {
	t.Parallel()
	b, _ := keyedServer(t, api.Idempotency{TTL: 300 * time.Millisecond}, api.AsyncGroup{})
	first := postKeyed(t, b.srv.URL, "/events", "k", "")
	require.Equal(t, http.StatusCreated, first.status)
	require.Eventually(t, func() bool {
		var expired bool
		require.NoError(t, b.store.DB.Pool().QueryRow("SELECT MAX(expires_at) <= NOW(6) FROM idempotency_keys").Scan(&expired))
		return expired
	}, 10*time.Second, 20*time.Millisecond, "the key expires on the database's clock")
	later := postKeyed(t, b.srv.URL, "/events", "k", "")
	require.Equal(t, http.StatusCreated, later.status)
	require.Empty(t, later.replayed)
	require.NotEqual(t, idOf(t, first.body), idOf(t, later.body), "a new event")
	require.EqualValues(t, 2, count(t, b))
}

// Invariant: a bad key is a 400 naming the header, and nothing is written; so is a missing one
// when keys are required.
func TestBadKeys(t *testing.T) {
	t.Parallel()
	b, handler := keyedServer(t, api.Idempotency{}, api.AsyncGroup{})
	bad := map[string]string{
		"empty":          "",
		"empty quoted":   `""`,
		"256 characters": strings.Repeat("k", 256),
		"256 quoted":     `"` + strings.Repeat("k", 256) + `"`,
		"control":        "a\x01b",
		"tab":            "a\tb",
		"DEL":            "a\x7fb",
		"non-ASCII":      "clé",
		"open quote":     `"abc`,
		"bad escape":     `"a\nb"`,
		"inner quote":    `"a"b"`,
		"space in bare":  "a b",
	}
	for name, key := range bad {
		for _, path := range []string{"/events", "/events/async"} {
			// Straight to the handler: Go's client and server refuse control characters in a
			// header, API Gateway passes what it gets to the Lambda.
			req := httptest.NewRequest(http.MethodPost, path, nil)
			req.Header[api.KeyHeader] = []string{key} // as sent, even empty
			rec := httptest.NewRecorder()
			openapitest.Handler(t, handler).ServeHTTP(rec, req)
			require.Equal(t, http.StatusBadRequest, rec.Code, "%s on %s: %s", name, path, rec.Body)
			require.Contains(t, rec.Body.String(), api.KeyHeader, name)
		}
	}
	// The length is said: "it is longer" said not than what.
	for key, says := range map[string]string{
		strings.Repeat("k", 256):             "it is 256 characters long",
		`"` + strings.Repeat("k", 300) + `"`: "it is 300 characters long",
	} {
		got := postKeyed(t, b.srv.URL, "/events", key, "")
		require.Equal(t, http.StatusBadRequest, got.status)
		require.Contains(t, got.body, says)
	}
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/events", nil)
	require.NoError(t, err)
	req.Header[api.KeyHeader] = []string{"a", "b"}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "two keys")
	require.EqualValues(t, 0, count(t, b), "nothing written")

	for _, good := range []string{strings.Repeat("k", 255), `"` + strings.Repeat("k", 255) + `"`, `"with space \" and \\"`, "!~"} {
		require.Equal(t, http.StatusCreated, postKeyed(t, b.srv.URL, "/events", good, "").status, good)
	}

	required, _ := keyedServer(t, api.Idempotency{Required: true}, api.AsyncGroup{})
	for _, path := range []string{"/events", "/events/async"} {
		a := postKeyed(t, required.srv.URL, path, "", "")
		require.Equal(t, http.StatusBadRequest, a.status)
		require.Contains(t, a.body, "required")
	}
	require.EqualValues(t, 0, count(t, required))
	require.Equal(t, http.StatusCreated, postKeyed(t, required.srv.URL, "/events", "k", "").status)
}

// Invariant: a request whose key another transaction holds (a duplicate in flight in another
// process) waits up to IDEMPOTENCY_WAIT, then answers 409 with Retry-After and writes nothing; once
// the holder is done, the request runs.
//
// The request after the holder is done goes to a second server on the same stores whose wait is
// long: its wait bounds everything from the ids taken to the buckets' lock granted (a connection,
// SET autocommit, the locking UPDATE), and the first request's UPDATE, cut off by its wait, is
// still queued on the lock in the server when the holder rolls back (the server ends it only once
// it has run it and found its client gone). A 300 ms wait there failed with a 409 when the
// database stalled for a few hundred milliseconds, as one held by a parallel suite does.
func TestDuplicateInFlightElsewhereWaitsThenConflicts(t *testing.T) {
	t.Parallel()
	b, _ := keyedServer(t, api.Idempotency{Wait: 300 * time.Millisecond}, api.AsyncGroup{Inline: true})
	patient := openapitest.NewServer(t, &api.Server{Stores: b.store.API(), Queue: b.queue,
		Idempotency: api.Idempotency{Wait: time.Minute}, AsyncGroup: api.AsyncGroup{Inline: true}})
	tx, err := b.store.DB.Pool().Begin()
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.Exec("SELECT bucket FROM idempotency_buckets FOR UPDATE") // every bucket held
	require.NoError(t, err)
	start := time.Now()
	a := postKeyed(t, b.srv.URL, "/events", "k", "")
	require.Equal(t, http.StatusConflict, a.status, a.body)
	require.Equal(t, "1", a.retry)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "it waited")
	require.NoError(t, tx.Rollback())
	require.EqualValues(t, 0, count(t, b))
	require.Equal(t, http.StatusCreated, postKeyed(t, patient.URL, "/events", "k", "").status)
}

// Invariant: a body of only JSON whitespace is no body (docs/api.md, "Request bodies"), for its
// key too: a repeat that sends one where the first sent none, or the other way round, is the same
// request and gets the stored answer. It used to be a 422, "another request", for a request the
// API reads as the same one; {} is still another body.
func TestAWhitespaceBodyIsTheSameRequestAsNone(t *testing.T) {
	t.Parallel()
	b, _ := keyedServer(t, api.Idempotency{}, api.AsyncGroup{})
	for _, c := range []struct{ path, key, first, again string }{
		{"/events", "w1", "", " \r\n\t"},
		{"/events", "w2", "\n", ""},
		{"/events/async", "w3", "", "  "},
		{"/events/async", "w4", "\t", "\r\n"},
	} {
		first := postKeyed(t, b.srv.URL, c.path, c.key, c.first)
		require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, first.status, first.body)
		again := postKeyed(t, b.srv.URL, c.path, c.key, c.again)
		require.Equal(t, first.status, again.status, "%s %q then %q: %s", c.path, c.first, c.again, again.body)
		require.Equal(t, first.body, again.body)
		require.Equal(t, "true", again.replayed)
	}
	require.EqualValues(t, 4, count(t, b), "one event a key")
	m := postKeyed(t, b.srv.URL, "/events", "w1", "{}")
	require.Equal(t, http.StatusUnprocessableEntity, m.status, "{} is another body")
}
