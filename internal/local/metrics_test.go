package local_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The local runner's /metrics after known work: three sync events and two async ones, each sent in
// a message of its own and processed by the processor (the sweeper's grace keeps it away): the
// counts of every part, exactly, with the part as a label.
func TestMetricsEndpointAfterKnownWork(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	client := localsqs.Client(t)
	queues := localsqs.Queues(t, client, 30, 5)
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys, err := local.Start(ctx, store, client, local.Options{HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, MetricsAddr: "127.0.0.1:0",
		Queues: queues, AsyncLinger: new(time.Duration(0)), SweepInterval: 100 * time.Millisecond,
		Sweep: sweeping.Config{Grace: new(time.Hour), Logger: log}}, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sys.Wait())
	})
	require.NotEmpty(t, sys.MetricsURL)

	post := func(path string) int64 {
		t.Helper()
		resp, err := http.Post(sys.URL+path, "application/json", nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Less(t, resp.StatusCode, 300)
		var e struct{ ID int64 }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		return e.ID
	}
	for range 3 {
		post("/events")
	}
	async := []int64{post("/events/async"), post("/events/async")}
	for _, id := range async {
		require.Eventually(t, func() bool {
			resp, err := http.Get(sys.URL + "/events/" + strconv.FormatInt(id, 10))
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var e struct{ State string }
			return json.NewDecoder(resp.Body).Decode(&e) == nil && e.State == "processed"
		}, 30*time.Second, 20*time.Millisecond, "event %d processed", id)
	}
	// The processor records a batch once its settlement has returned: just after the event reads
	// processed.
	var body string
	require.Eventually(t, func() bool {
		body = scrape(t, sys.MetricsURL)
		return value(t, body, `exactlyonce_events_processed_total{part="processor"}`) == 2
	}, 10*time.Second, 20*time.Millisecond)

	for series, want := range map[string]float64{
		`exactlyonce_events_created_sync_total{part="api"}`:   3,
		`exactlyonce_events_created_async_total{part="api"}`:  2,
		`exactlyonce_idempotent_replays_total{part="api"}`:    0,
		`exactlyonce_queue_sends_total{part="api"}`:           2,
		`exactlyonce_queue_send_failures_total{part="api"}`:   0,
		`exactlyonce_events_processed_total{part="sweeper"}`:  0,
		`exactlyonce_outcome_missing_total{part="processor"}`: 0,
	} {
		require.Equal(t, want, value(t, body, series), series)
	}
	// Every transaction of the api: at least one per create.
	require.GreaterOrEqual(t, value(t, body, `exactlyonce_transaction_duration_seconds_count{part="api"}`), 5.0)
	require.GreaterOrEqual(t, value(t, body, `exactlyonce_claim_batch_size_sum{part="processor"}`), 2.0)
	// The sweeper's agent pulses beside the work above, not after it: its first pulse may still be
	// under way on a loaded machine.
	require.Eventually(t, func() bool {
		return value(t, scrape(t, sys.MetricsURL), `exactlyonce_agent_pulses_total{part="sweeper"}`) >= 1
	}, time.Minute, 20*time.Millisecond, "the sweeper's agent pulsed")
	// The sweeper's agent reads the waiting events with its maintenance (at its start, then every
	// MaintainEvery): a gauge, of at most the two async events.
	require.Eventually(t, func() bool {
		n := value(t, scrape(t, sys.MetricsURL), `exactlyonce_pending_events{part="sweeper"}`)
		return n >= 0 && n <= 2
	}, 10*time.Second, 20*time.Millisecond)
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// value returns the value of series in a scrape (-1 when it is absent).
func value(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}
