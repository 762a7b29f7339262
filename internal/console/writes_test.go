package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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

// writeBed is a console in front of the real API, in-process, on a scratch database, with a
// webhook receiver that fails every delivery (400) until told otherwise.
type writeBed struct {
	store  *wire.Stores
	api    http.Handler
	base   string
	token  string
	hook   *httptest.Server
	status chan int
}

func newWriteBed(t *testing.T) *writeBed {
	t.Helper()
	b := &writeBed{store: wire.NewStores(testdb.Core(t, mysql.Config{}, 4))}
	b.api = openapitest.Handler(t, &api.Server{Stores: b.store.API(), Webhook: webhook.Policy{AllowLoopback: true}})
	b.hook = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusBadRequest)
	}))
	t.Cleanup(b.hook.Close)
	b.base = serve(t, Options{API: b.api})
	b.token = session(t, b.base)["csrfToken"]
	return b
}

// task creates a task of ref through the API and returns its id.
func (b *writeBed) task(t *testing.T, ref string) int64 {
	t.Helper()
	body := `{"url": "` + b.hook.URL + `", "payload": 1, "referenceId": "` + ref + `", "maxRetries": 0}`
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/events/async", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	b.api.ServeHTTP(rec, req)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	i := strings.Index(rec.Body.String(), `"id":`)
	j := i + 5
	for j < rec.Body.Len() && rec.Body.String()[j] >= '0' && rec.Body.String()[j] <= '9' {
		j++
	}
	id, err := strconv.ParseInt(rec.Body.String()[i+5:j], 10, 64)
	require.NoError(t, err)
	return id
}

func (b *writeBed) engine() *processing.Engine {
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: 5 * time.Second})
	return &processing.Engine{Store: b.store.Events, TaskStore: b.store.Tasks, By: exactlyonce.BySweeper, Tasks: &processing.Tasks{Deliverer: client,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond}}
}

// deliver runs deliveries until nothing is claimed.
func (b *writeBed) deliver(t *testing.T) {
	t.Helper()
	e := b.engine()
	for i := 0; i < 100; i++ {
		n, err := e.ProcessDue(context.Background(), 0, 50)
		require.NoError(t, err)
		if n.Claimed == 0 {
			return
		}
	}
	t.Fatal("still claiming after 100 rounds")
}

func (b *writeBed) post(t *testing.T, path, body string, h map[string]string) (int, string) {
	t.Helper()
	hd := map[string]string{"X-CSRF-Token": b.token}
	for k, v := range h {
		hd[k] = v
	}
	st, _, got := do(t, "POST", b.base+"/ui/api"+path, body, hd)
	return st, got
}

// The retries through the console, against the real API on a scratch database: every odd id or
// reference is a 4xx whose JSON names the problem (the console's own 404 for what is off its list,
// the API's 400, 404 or 409 for the rest), never a 5xx, and no write; a body other than none or {}
// is refused, and one over the limit is a 413. The failed task is still failed after them all.
func TestOddRetriesAreRefusedWithoutAWrite(t *testing.T) {
	t.Parallel()
	b := newWriteBed(t)
	id := b.task(t, "odd")
	b.deliver(t)
	plain, err := b.store.Events.CreateProcessed(context.Background(), "plain")
	require.NoError(t, err)
	task := strconv.FormatInt(id, 10)
	for _, c := range []struct {
		path, body string
		status     int
		says       string
	}{
		{"/events/0/retry", "", 400, "positive integer"},
		{"/events/0001/retry", "", 400, "positive integer"},
		{"/events/-1/retry", "", 404, "an event id is 1 to 19 digits"},
		{"/events/1e3/retry", "", 404, "an event id is 1 to 19 digits"},
		{"/events/1%20/retry", "", 404, "an event id is 1 to 19 digits"},
		{"/events/%2e%2e/retry", "", 404, "an event id is 1 to 19 digits"},
		{"/events/%C3%A9/retry", "", 404, "an event id is 1 to 19 digits"},
		{"/events/" + strings.Repeat("9", 500) + "/retry", "", 404, "an event id is 1 to 19 digits"},
		{"/events/00000000000000000001/retry", "", 404, "an event id is 1 to 19 digits"},
		{"/events/9223372036854775808/retry", "", 400, "out of range"},
		{"/events/9223372036854775807/retry", "", 404, "not found"},
		{"/events/99999999/retry", "", 404, "not found"}, // above the id counter
		{"/events/" + strconv.FormatInt(plain.ID, 10) + "/retry", "", 409, "is not a task"},
		{"/events/" + task + "/retry", "[]", 400, "JSON object"},
		{"/events/" + task + "/retry", "null", 400, "JSON object"},
		{"/events/" + task + "/retry", `{"x": 1}`, 400, "unknown field"},
		{"/events/" + task + "/retry", "garbage", 400, "not valid JSON"},
		{"/events/" + task + "/retry", `{"a":` + strings.Repeat("[", 10000), 400, "not valid JSON"},
		{"/events/" + task + "/retry", strings.Repeat(" ", maxRequestBody+1), 413, "over 65536 bytes"},
		{"/references/a%20/retry", "", 400, "must not end with a space"},
		{"/references/%FF/retry", "", 400, "valid UTF-8"},
		{"/references/%ED%A0%80/retry", "", 400, "valid UTF-8"},
		{"/references/a%09b/retry", "", 404, "a name is at most 255 characters"},
		{"/references/%2e/retry", "", 404, "a name is at most 255 characters"},
		{"/references/" + strings.Repeat("x", exactlyonce.MaxNameLength+1) + "/retry", "", 404, "a name is at most 255 characters"},
		{"/references/odd/retry", `{"dryRun": false}`, 400, "unknown field"},
	} {
		st, got := b.post(t, c.path, c.body, nil)
		require.Equal(t, c.status, st, "%.80s: %s", c.path, got)
		require.Contains(t, got, c.says, "%.80s", c.path)
		require.Contains(t, got, `"error"`, "%.80s", c.path)
	}
	// A reference with no failed task (none of that name, one of dots, one of another script)
	// retries nothing.
	for _, ref := range []string{"nope", "..%2e", "%C3%A9"} {
		st, got := b.post(t, "/references/"+ref+"/retry", "", nil)
		require.Equal(t, http.StatusOK, st, got)
		require.Contains(t, got, `"retried":[]`, ref)
	}
	st, _, got := do(t, "GET", b.base+"/ui/api/events/"+task, "", nil)
	require.Equal(t, http.StatusOK, st, got)
	require.Contains(t, got, `"state":"failed"`, "nothing was retried")
	require.Contains(t, got, `"attempts":1`)
}

// A retry that is not the console's own page's (no token, a wrong one, another site's or origin's,
// a form's content type without the token, a method other than POST) is refused before it reaches
// the API: the failed task stays failed.
func TestForeignRetriesReachNothing(t *testing.T) {
	t.Parallel()
	b := newWriteBed(t)
	id := b.task(t, "csrf")
	b.deliver(t)
	path := b.base + "/ui/api/events/" + strconv.FormatInt(id, 10) + "/retry"
	ref := b.base + "/ui/api/references/csrf/retry"
	own := "http://" + strings.TrimPrefix(b.base, "http://")
	for _, c := range []struct {
		name, method, url, body string
		headers                 map[string]string
		status                  int
	}{
		{"no token", "POST", path, "", nil, 403},
		{"empty token", "POST", path, "", map[string]string{"X-CSRF-Token": ""}, 403},
		{"wrong token", "POST", path, "", map[string]string{"X-CSRF-Token": b.token + "x"}, 403},
		{"token's prefix", "POST", path, "", map[string]string{"X-CSRF-Token": b.token[:10]}, 403},
		{"cross-site form", "POST", ref, "a=1", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, 403},
		{"form of the same origin, no token", "POST", ref, "a=1", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": own, "Sec-Fetch-Site": "same-origin"}, 403},
		{"cross-site with the token", "POST", path, "", map[string]string{"X-CSRF-Token": b.token, "Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site with the token", "POST", path, "", map[string]string{"X-CSRF-Token": b.token, "Sec-Fetch-Site": "same-site"}, 403},
		{"typed (none) with the token", "POST", path, "", map[string]string{"X-CSRF-Token": b.token, "Sec-Fetch-Site": "none"}, 403},
		{"foreign origin with the token", "POST", path, "", map[string]string{"X-CSRF-Token": b.token, "Origin": "http://127.0.0.1.evil.example"}, 403},
		{"null origin with the token", "POST", ref, "", map[string]string{"X-CSRF-Token": b.token, "Origin": "null"}, 403},
		{"https origin with the token", "POST", ref, "", map[string]string{"X-CSRF-Token": b.token, "Origin": "https://" + strings.TrimPrefix(b.base, "http://")}, 403},
		{"foreign host", "POST", ref, "", map[string]string{"X-CSRF-Token": b.token, "Host": "evil.example"}, 403},
		{"GET", "GET", path, "", map[string]string{"X-CSRF-Token": b.token}, 405},
		{"PUT", "PUT", ref, "", map[string]string{"X-CSRF-Token": b.token}, 405},
		{"DELETE", "DELETE", path, "", map[string]string{"X-CSRF-Token": b.token}, 405},
		{"OPTIONS", "OPTIONS", path, "", map[string]string{"X-CSRF-Token": b.token, "Origin": own}, 405},
	} {
		st, h, got := do(t, c.method, c.url, c.body, c.headers)
		require.Equal(t, c.status, st, "%s: %s", c.name, got)
		require.Contains(t, got, `"error"`, c.name)
		require.Empty(t, h.Get("Access-Control-Allow-Origin"), c.name)
	}
	st, _, got := do(t, "GET", path[:len(path)-len("/retry")], "", nil)
	require.Equal(t, http.StatusOK, st, got)
	require.Contains(t, got, `"state":"failed"`, "nothing was retried")
	// The page's own POST, same origin, with the token, goes through.
	st, _, got = do(t, "POST", path, "", map[string]string{"X-CSRF-Token": b.token, "Origin": own, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusOK, st, got)
}

// Double submits: the same retry sent n times at once (a double click, two operators) applies
// once, the others a 409 that says the task is not failed now; a reference's retry sent n times at
// once retries each of its failed tasks once. The task is delivered once more, not n times.
func TestConcurrentRetriesApplyOnce(t *testing.T) {
	t.Parallel()
	b := newWriteBed(t)
	id := b.task(t, "twice")
	refIDs := []int64{b.task(t, "bulk"), b.task(t, "bulk"), b.task(t, "bulk")}
	b.deliver(t)
	const n = 8
	type answer struct {
		status int
		body   string
	}
	run := func(path string) []answer {
		out := make(chan answer, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				st, got := b.rawPost(path)
				out <- answer{st, got}
			}()
		}
		close(start)
		var all []answer
		for range n {
			all = append(all, <-out)
		}
		return all
	}
	task := strconv.FormatInt(id, 10)
	ok := 0
	for _, a := range run("/events/" + task + "/retry") {
		switch a.status {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			require.Contains(t, a.body, "task "+task+" is pending, not failed", a.body)
		default:
			t.Fatalf("retry: %d %s", a.status, a.body)
		}
	}
	require.Equal(t, 1, ok, "the retry applied once")
	var retried []string
	for _, a := range run("/references/bulk/retry") {
		require.Equal(t, http.StatusOK, a.status, a.body)
		var got struct {
			Retried []int64 `json:"retried"`
		}
		require.NoError(t, json.Unmarshal([]byte(a.body), &got), a.body)
		for _, r := range got.Retried {
			retried = append(retried, strconv.FormatInt(r, 10))
		}
	}
	want := []string{}
	for _, r := range refIDs {
		want = append(want, strconv.FormatInt(r, 10))
	}
	require.ElementsMatch(t, want, retried, "each failed task of the reference retried once")
	b.deliver(t)
	st, _, got := do(t, "GET", b.base+"/ui/api/events/"+task, "", nil)
	require.Equal(t, http.StatusOK, st, got)
	require.Contains(t, got, `"attempts":2`, "delivered once more")
}

// rawPost is post for another goroutine than the test's: an error is its text, status 0.
func (b *writeBed) rawPost(path string) (int, string) {
	req, err := http.NewRequest("POST", b.base+"/ui/api"+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("X-CSRF-Token", b.token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(body)
}

// Retries racing the deliveries of the same task (a sweeper delivering all along, every delivery
// failing): each retry answers 200, or a 409 that names a state other than failed, and every 200
// is one more delivery, no more, no less. (The interleaving where the task fails again between a
// retry's lock and its read is forced in the taskstore's
// TestARetryOfATaskThatFailedAgainMeanwhileApplies; here it may or may not happen.)
func TestRetriesRacingDeliveriesApplyEachOnce(t *testing.T) {
	t.Parallel()
	b := newWriteBed(t)
	id := b.task(t, "race")
	b.deliver(t)
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		e := b.engine()
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := e.ProcessDue(context.Background(), 0, 50); err != nil {
				done <- err
				return
			}
		}
	}()
	path := "/events/" + strconv.FormatInt(id, 10) + "/retry"
	const n, rounds = 6, 4
	applied := 0
	for range rounds {
		out := make(chan [2]string, n)
		for range n {
			go func() {
				st, got := b.rawPost(path)
				out <- [2]string{strconv.Itoa(st), got}
			}()
		}
		for range n {
			a := <-out
			switch a[0] {
			case "200":
				applied++
			case "409":
				require.Contains(t, a[1], "not failed", a[1])
				require.NotContains(t, a[1], "is failed", a[1])
			default:
				t.Fatalf("retry: %s %s", a[0], a[1])
			}
		}
	}
	close(stop)
	require.NoError(t, <-done)
	b.deliver(t)
	require.Positive(t, applied)
	st, _, got := do(t, "GET", b.base+"/ui/api/events/"+strconv.FormatInt(id, 10), "", nil)
	require.Equal(t, http.StatusOK, st, got)
	require.Contains(t, got, `"state":"failed"`)
	require.Contains(t, got, `"attempts":`+strconv.Itoa(1+applied), "one delivery per retry applied")
}
