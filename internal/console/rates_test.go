package console

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/metrics/prom"
	"github.com/stretchr/testify/require"
)

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// ratesAnswer is GET /ui/api/rates's answer, every field required to be there.
type ratesAnswer struct {
	Source             *string             `json:"source"`
	WindowSeconds      *float64            `json:"windowSeconds"`
	ProcessedPerSecond map[string]*float64 `json:"processedPerSecond"`
	NotMeasured        []string            `json:"notMeasured"`
	Unavailable        string              `json:"unavailable"`
}

// getRates asks base for its rates and checks the answer's shape: a 200, every key present.
func getRates(t *testing.T, base string) (source string, window float64, perSecond map[string]float64, notMeasured []string, unavailable string) {
	t.Helper()
	status, h, body := do(t, "GET", base+"/ui/api/rates", "", nil)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "no-store", h.Get("Cache-Control"))
	var a ratesAnswer
	require.NoError(t, json.Unmarshal([]byte(body), &a), body)
	require.NotNil(t, a.Source, body)
	require.NotNil(t, a.WindowSeconds, body)
	require.NotNil(t, a.NotMeasured, body)
	require.Len(t, a.ProcessedPerSecond, len(ratePaths), body)
	perSecond = map[string]float64{}
	for _, p := range ratePaths {
		require.NotNil(t, a.ProcessedPerSecond[p], "path %s in %s", p, body)
		perSecond[p] = *a.ProcessedPerSecond[p]
	}
	return *a.Source, *a.WindowSeconds, perSecond, a.NotMeasured, a.Unavailable
}

// promTotals reads the totals of reg as `make run` does (internal/local).
func promTotals(reg *prom.Registry) func() map[string]float64 {
	return func() map[string]float64 {
		return map[string]float64{
			PathAPI:       reg.Total(metrics.EventsCreatedSync, metrics.PartAPI),
			PathProcessor: reg.Total(metrics.EventsProcessed, metrics.PartProcessor),
			PathSweeper:   reg.Total(metrics.EventsProcessed, metrics.PartSweeper),
			PathAgent:     reg.Total(metrics.EventsProcessed, metrics.PartAgent),
		}
	}
}

// The local source over metrics recorded by the parts' recorders: the rate between the sample
// taken when it was made and each question, then between that first sample and the next question,
// the span growing.
func TestCounterRatesOverRecordedMetrics(t *testing.T) {
	t.Parallel()
	reg := prom.New()
	api, proc, sweep := reg.Recorder(metrics.PartAPI), reg.Recorder(metrics.PartProcessor), reg.Recorder(metrics.PartSweeper)
	api.Add(metrics.EventsCreatedSync, 1000) // before the first sample: not in any rate
	clk := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	base := serve(t, Options{API: &fakeAPI{}, Rates: newCounterRates("local", promTotals(reg), clk.now, PathAgent)})

	api.Add(metrics.EventsCreatedSync, 12)
	proc.Add(metrics.EventsProcessed, 30)
	sweep.Add(metrics.EventsProcessed, 6)
	api.Add(metrics.EventsCreatedAsync, 500) // not processed at birth: no path's
	clk.add(time.Minute)
	source, window, rates, notMeasured, unavailable := getRates(t, base)
	require.Empty(t, unavailable)
	require.Equal(t, "local", source)
	require.Equal(t, 60.0, window)
	require.Equal(t, map[string]float64{PathAPI: 0.2, PathProcessor: 0.5, PathSweeper: 0.1, PathAgent: 0}, rates)
	require.Equal(t, []string{PathAgent}, notMeasured)

	proc.Add(metrics.EventsProcessed, 60)
	clk.add(time.Minute)
	_, window, rates, _, _ = getRates(t, base)
	require.Equal(t, 120.0, window, "from the oldest sample")
	require.Equal(t, map[string]float64{PathAPI: 0.1, PathProcessor: 0.75, PathSweeper: 0.05, PathAgent: 0}, rates)
}

// The samples are bounded in number (questions every second keep at most maxRateSamples, the span
// staying about RatesWindow) and in age (after a silence longer than RatesWindow, the old samples
// are gone and the answer covers nothing yet).
func TestCounterRatesSampleBounds(t *testing.T) {
	t.Parallel()
	var total float64
	clk := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := newCounterRates("local", func() map[string]float64 { return map[string]float64{PathProcessor: total} }, clk.now)
	for i := range 600 {
		clk.add(time.Second)
		total += 2 // two events a second
		r, err := s.Rates(context.Background())
		require.NoError(t, err)
		require.LessOrEqual(t, len(s.samples), maxRateSamples)
		require.LessOrEqual(t, r.Window, RatesWindow)
		require.InDelta(t, 2.0, r.PerSecond[PathProcessor], 1e-9)
		if i >= int(RatesWindow/time.Second) {
			require.GreaterOrEqual(t, r.Window, RatesWindow-RatesWindow/maxRateSamples, "the span stays the window's")
		}
	}
	clk.add(RatesWindow + time.Second)
	total += 1e6
	r, err := s.Rates(context.Background())
	require.NoError(t, err)
	require.Zero(t, r.Window, "no sample within the window")
	require.Zero(t, r.PerSecond[PathProcessor])
	require.Len(t, s.samples, 1, "the old samples dropped, this one kept")
	clk.add(10 * time.Second)
	total += 30
	r, err = s.Rates(context.Background())
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, r.Window)
	require.InDelta(t, 3.0, r.PerSecond[PathProcessor], 1e-9)
}

// Questions from many requests at once (under -race).
func TestCounterRatesConcurrent(t *testing.T) {
	t.Parallel()
	reg := prom.New()
	proc := reg.Recorder(metrics.PartProcessor)
	s := NewCounterRates("local", promTotals(reg))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				proc.Add(metrics.EventsProcessed, 1)
				r, err := s.Rates(context.Background())
				require.NoError(t, err)
				require.GreaterOrEqual(t, r.PerSecond[PathProcessor], 0.0)
			}
		}()
	}
	wg.Wait()
}

// failingRates is a source that fails with err.
type failingRates struct{ err error }

func (f failingRates) Rates(context.Context) (Rates, error) {
	return Rates{Source: "cloudwatch"}, f.err
}

// A source that cannot answer: a 200 whose "unavailable" says why when the source says it
// (Unavailable), a generic text otherwise (never the error's own); every rate at zero, the keys all
// there. No source at all says so too. Only GET, without parameters.
func TestRatesUnavailable(t *testing.T) {
	t.Parallel()
	base := serve(t, Options{API: &fakeAPI{}, Rates: failingRates{&Unavailable{Why: "set FUNCTIONS"}}})
	source, window, rates, notMeasured, unavailable := getRates(t, base)
	require.Equal(t, "cloudwatch", source)
	require.Equal(t, "set FUNCTIONS", unavailable)
	require.Zero(t, window)
	require.Empty(t, notMeasured)
	for p, v := range rates {
		require.Zero(t, v, p)
	}

	base = serve(t, Options{API: &fakeAPI{}, Rates: failingRates{context.DeadlineExceeded}})
	_, _, _, _, unavailable = getRates(t, base)
	require.Equal(t, "the rates could not be read; the console's log says why", unavailable)

	base = serve(t, Options{API: &fakeAPI{}})
	source, _, _, _, unavailable = getRates(t, base)
	require.Equal(t, "none", source)
	require.Equal(t, "this console has no source of rates", unavailable)

	status, h, body := do(t, "POST", base+"/ui/api/rates", "", nil)
	require.Equal(t, http.StatusMethodNotAllowed, status, body)
	require.Equal(t, "GET", h.Get("Allow"))
	status, _, body = do(t, "GET", base+"/ui/api/rates?window=60", "", nil)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, "no query parameters")
}
