package local_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// `make run`'s server serves the operators' console at /ui/ beside the API: its pages, the API's
// routes through it (in-process), the run's queue with its DLQ; every other path is the API's.
func TestConsoleBesideTheAPI(t *testing.T) {
	t.Parallel()
	sys, _, queues := startWithConsole(t)
	require.Equal(t, sys.URL+"/ui/", sys.ConsoleURL)

	get := func(url string) (int, string, http.Header) {
		t.Helper()
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b), resp.Header
	}
	status, body, h := get(sys.ConsoleURL)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "<html")
	require.NotEmpty(t, h.Get("Content-Security-Policy"))

	status, body, _ = get(sys.URL + "/ui/api/agents")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"agents"`)
	status, api, _ := get(sys.URL + "/agents")
	require.Equal(t, http.StatusOK, status, "the API is where it was")
	require.Contains(t, api, `"agents"`)

	status, body, _ = get(sys.URL + "/ui/api/queues")
	require.Equal(t, http.StatusOK, status, body)
	var q struct {
		Queues []struct {
			URL string `json:"url"`
			DLQ struct {
				URL string `json:"url"`
			} `json:"dlq"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &q))
	require.Len(t, q.Queues, 1, "no counter service in this run")
	require.Equal(t, queues.URL, q.Queues[0].URL)
	require.Equal(t, queues.DLQURL, q.Queues[0].DLQ.URL)

	var s struct{ Mode, APIURL string }
	_, body, _ = get(sys.URL + "/ui/api/session")
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	require.Equal(t, "local", s.Mode)
	require.Equal(t, sys.URL, s.APIURL)
	require.True(t, strings.HasPrefix(sys.URL, "http://127.0.0.1:"))

	// The rates come from the run's own metrics, counted since the console started: three sync
	// creates are the api path's, over the span the answer gives.
	for range 3 {
		resp, err := http.Post(sys.URL+"/events", "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	status, body, _ = get(sys.URL + "/ui/api/rates")
	require.Equal(t, http.StatusOK, status, body)
	var r struct {
		Source             string
		WindowSeconds      float64
		ProcessedPerSecond map[string]float64
		NotMeasured        []string
		Unavailable        *string
	}
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Nil(t, r.Unavailable, body)
	require.Equal(t, "local", r.Source)
	require.Positive(t, r.WindowSeconds)
	require.InDelta(t, 3, r.ProcessedPerSecond["api"]*r.WindowSeconds, 1e-6, body)
	require.Equal(t, map[string]float64{"api": r.ProcessedPerSecond["api"], "processor": 0, "sweeper": 0, "agent": 0}, r.ProcessedPerSecond)
	require.Equal(t, []string{"agent"}, r.NotMeasured, "a standalone agent counts in its own process")
}

// With the console on the same port, the local API (which has no authorisation of its own) answers
// programs and the browser on its own address only: a cross-site page's POST (a simple request,
// sent without a CORS preflight), a POST with a foreign Origin, and a DNS-rebinding page's request
// (same-origin to the browser, under another Host) are refused and create nothing. Every answer, the
// refusals too, says nosniff.
func TestTheLocalAPIRefusesOtherSitesBrowsers(t *testing.T) {
	t.Parallel()
	sys, store, _ := startWithConsole(t)
	own := strings.TrimPrefix(sys.URL, "http://")
	post := func(host string, headers map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, sys.URL+"/events", strings.NewReader(""))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Content-Type", "text/plain")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), "%v %v: %d", host, headers, resp.StatusCode)
		return resp.StatusCode
	}
	for name, c := range map[string]struct {
		host    string
		headers map[string]string
	}{
		"cross-site page":      {own, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}},
		"same-site page":       {own, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://other.localhost:1"}},
		"foreign Origin alone": {own, map[string]string{"Origin": "http://evil.example"}},
		"DNS rebinding":        {"evil.example:" + strings.Split(own, ":")[1], map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://evil.example:" + strings.Split(own, ":")[1]}},
	} {
		require.Equal(t, http.StatusForbidden, post(c.host, c.headers), name)
	}
	n, err := store.Events.Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "a refused request created an event")

	require.Equal(t, http.StatusCreated, post(own, nil), "a program")
	require.Equal(t, http.StatusCreated, post(own, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + own}), "the browser on the API's own address")
	require.Equal(t, http.StatusCreated, post(own, map[string]string{"Sec-Fetch-Site": "none"}), "an address typed in the browser")
}

// startWithConsole starts a local system on a scratch database and queues of its own, stopped when
// the test ends.
func startWithConsole(t *testing.T) (*local.System, *wire.Stores, queue.Queues) {
	t.Helper()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	client := localsqs.Client(t)
	queues := localsqs.Queues(t, client, 30, 5)
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys, err := local.Start(ctx, store, client, local.Options{HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, Queues: queues}, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sys.Wait())
	})
	return sys, store, queues
}
