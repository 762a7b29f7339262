package prom_test

import (
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/metrics/prom"
	"github.com/stretchr/testify/require"
)

// The Prometheus sink: counters with _total, the part as a label, a part's series present at zero
// before anything happened, durations in seconds.
func TestPrometheus(t *testing.T) {
	p := prom.New()
	api := p.Recorder(metrics.PartAPI)
	proc := p.Recorder(metrics.PartProcessor)
	api.Add(metrics.EventsCreatedSync, 3)
	proc.Add(metrics.EventsProcessed, 2)
	proc.ObserveDuration(metrics.TransactionDuration, 20*time.Millisecond)
	proc.Set(metrics.PendingEvents, 7) // not the processor's: its series is made when recorded

	body := scrape(t, p)
	for _, line := range []string{
		`exactlyonce_events_created_sync_total{part="api"} 3`,
		`exactlyonce_events_processed_total{part="processor"} 2`,
		`exactlyonce_outcome_busy_total{part="processor"} 0`,
		`exactlyonce_transaction_duration_seconds_count{part="processor"} 1`,
		`exactlyonce_transaction_duration_seconds_sum{part="processor"} 0.02`,
		`exactlyonce_transaction_duration_seconds_bucket{part="processor",le="0.025"} 1`,
		`exactlyonce_pending_events{part="processor"} 7`,
		`# TYPE exactlyonce_events_processed_total counter`,
	} {
		require.Contains(t, body, line+"\n")
	}
	require.NotContains(t, body, `exactlyonce_events_created_sync_total{part="processor"}`)
}

func scrape(t *testing.T, p *prom.Registry) string {
	t.Helper()
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// Recording allocates nothing, in the registry too: it is on the hot paths.
func TestRecordingDoesNotAllocate(t *testing.T) {
	r := prom.New().Recorder(metrics.PartAPI)
	allocs := testing.AllocsPerRun(100, func() {
		r.Add(metrics.EventsCreatedSync, 1)
		r.ObserveDuration(metrics.TransactionDuration, time.Millisecond)
		r.Set(metrics.PendingEvents, 1)
	})
	require.Zero(t, allocs)
}

// Total reads a part's counter as recorded, summed over its Recorders; a part that recorded
// nothing, a metric it does not publish and one that is not a counter read 0, and reading makes no
// series appear.
func TestTotal(t *testing.T) {
	p := prom.New()
	require.Zero(t, p.Total(metrics.EventsProcessed, metrics.PartProcessor), "no recorder yet")
	a, b := p.Recorder(metrics.PartProcessor), p.Recorder(metrics.PartProcessor)
	a.Add(metrics.EventsProcessed, 3)
	b.Add(metrics.EventsProcessed, 4)
	p.Recorder(metrics.PartSweeper).Add(metrics.EventsProcessed, 5)
	p.Recorder(metrics.PartAPI).Add(metrics.EventsCreatedSync, 2)
	require.Equal(t, 7.0, p.Total(metrics.EventsProcessed, metrics.PartProcessor))
	require.Equal(t, 5.0, p.Total(metrics.EventsProcessed, metrics.PartSweeper))
	require.Equal(t, 2.0, p.Total(metrics.EventsCreatedSync, metrics.PartAPI))
	require.Zero(t, p.Total(metrics.EventsProcessed, metrics.PartAgent))
	require.Zero(t, p.Total(metrics.EventsCreatedSync, metrics.PartProcessor))
	require.Zero(t, p.Total(metrics.TransactionDuration, metrics.PartAPI))
	require.NotContains(t, scrape(t, p), `exactlyonce_events_created_sync_total{part="processor"}`)
}
