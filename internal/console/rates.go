package console

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// The paths by which an event comes to be processed, the keys of processedPerSecond in
// GET /ui/api/rates: created processed by POST /events (api), by the processor from the queue, by
// the sweeper (or `make run`'s sweeper agent), by a standalone agent (cmd/agent).
const (
	PathAPI       = "api"
	PathProcessor = "processor"
	PathSweeper   = "sweeper"
	PathAgent     = "agent"
)

// ratePaths are the paths, in the answer's order; every answer holds all of them, so that the
// pages can rely on its keys.
var ratePaths = []string{PathAPI, PathProcessor, PathSweeper, PathAgent}

// RatesWindow is how far back the rates look: the last 5 minutes.
const RatesWindow = 5 * time.Minute

// RatesSource gives GET /ui/api/rates: the events processed per second by each path over about the
// last RatesWindow. The database cannot say it cheaply (the processed rows of the last minutes are
// mixed with history, and folded), the metrics the parts record can.
type RatesSource interface {
	Rates(ctx context.Context) (Rates, error)
}

// Rates is what a RatesSource measured.
type Rates struct {
	// Source names where the rates come from: "local" (the process's own metrics) or "cloudwatch".
	Source string
	// Window is the span the rates actually cover (0: none yet).
	Window time.Duration
	// PerSecond holds the events processed per second by path; a path left out is 0.
	PerSecond map[string]float64
	// NotMeasured lists the paths the source cannot see (their 0 means "unknown", not "none").
	NotMeasured []string
}

// Unavailable is the error a RatesSource returns when it cannot answer for a reason the operator
// can act on (a permission, a setting): its text is shown as it is. Any other error is logged and
// the answer says only that the source could not be read.
type Unavailable struct{ Why string }

func (u *Unavailable) Error() string { return u.Why }

// ratesJSON is the answer of GET /ui/api/rates.
type ratesJSON struct {
	Source             string             `json:"source"`
	WindowSeconds      float64            `json:"windowSeconds"`
	ProcessedPerSecond map[string]float64 `json:"processedPerSecond"`
	NotMeasured        []string           `json:"notMeasured"`
	Unavailable        string             `json:"unavailable,omitempty"`
}

// serveRates answers GET /ui/api/rates. A source that cannot answer is not the console's failure
// nor the API's: the answer is a 200 that says why in "unavailable", with every rate at zero, so
// that the overview draws the rest of its page and says why the rates are missing.
func (c *console) serveRates(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, "GET")
		return
	}
	if len(r.URL.Query()) > 0 {
		writeError(w, http.StatusBadRequest, "GET /ui/api/rates takes no query parameters")
		return
	}
	out := ratesJSON{Source: "none", ProcessedPerSecond: map[string]float64{}, NotMeasured: []string{}}
	for _, p := range ratePaths {
		out.ProcessedPerSecond[p] = 0
	}
	if c.opt.Rates == nil {
		out.Unavailable = "this console has no source of rates"
		writeJSON(w, http.StatusOK, out)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.awsTimeout())
	defer cancel()
	rates, err := c.opt.Rates.Rates(ctx)
	out.Source = rates.Source
	if err != nil {
		var u *Unavailable
		if errors.As(err, &u) {
			out.Unavailable = u.Why
		} else {
			out.Unavailable = "the rates could not be read; the console's log says why"
		}
		c.log.Warn("console: rates unavailable", "source", rates.Source, "err", err)
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.WindowSeconds = rates.Window.Seconds()
	for _, p := range ratePaths {
		out.ProcessedPerSecond[p] = rates.PerSecond[p]
	}
	if rates.NotMeasured != nil {
		out.NotMeasured = rates.NotMeasured
	}
	writeJSON(w, http.StatusOK, out)
}

// maxRateSamples bounds the samples a CounterRates keeps; with RatesWindow it sets their least
// spacing (5 s), so that a page polling every second keeps the window's full span all the same.
const maxRateSamples = 60

// CounterRates is the RatesSource of a process that counts its own events (`make run`): it reads
// the counters' current totals when asked, keeps some of those readings (at most maxRateSamples, none
// older than RatesWindow), and answers the rate between the oldest it keeps and now. Safe for
// concurrent use.
type CounterRates struct {
	source      string
	totals      func() map[string]float64
	notMeasured []string
	now         func() time.Time // time.Now; tests set it

	mu      sync.Mutex
	samples []rateSample // oldest first
}

type rateSample struct {
	at     time.Time
	totals map[string]float64
}

// NewCounterRates returns a CounterRates named source that reads totals (events processed since the
// process started, by path) and reports notMeasured as the paths it cannot see. It reads them once
// now, so that the first question already has a span to answer over.
func NewCounterRates(source string, totals func() map[string]float64, notMeasured ...string) *CounterRates {
	return newCounterRates(source, totals, time.Now, notMeasured...)
}

// newCounterRates is NewCounterRates on the clock now (tests).
func newCounterRates(source string, totals func() map[string]float64, now func() time.Time, notMeasured ...string) *CounterRates {
	s := &CounterRates{source: source, totals: totals, notMeasured: notMeasured, now: now}
	_, _ = s.Rates(context.Background())
	return s
}

// Rates reads the totals and answers the rate since the oldest sample within RatesWindow.
func (s *CounterRates) Rates(context.Context) (Rates, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Read under the lock, so that the samples stay in the order of their times.
	now, cur := s.now(), s.totals()
	drop := 0
	for drop < len(s.samples) && now.Sub(s.samples[drop].at) > RatesWindow {
		drop++
	}
	s.samples = append(s.samples[:0], s.samples[drop:]...)

	out := Rates{Source: s.source, PerSecond: map[string]float64{}, NotMeasured: s.notMeasured}
	if len(s.samples) > 0 {
		oldest := s.samples[0]
		if out.Window = now.Sub(oldest.at); out.Window > 0 {
			for _, p := range ratePaths {
				// A counter only grows; a smaller total would be another process's, counted as none.
				out.PerSecond[p] = max(cur[p]-oldest.totals[p], 0) / out.Window.Seconds()
			}
		}
	}
	if n := len(s.samples); n == 0 || now.Sub(s.samples[n-1].at) >= RatesWindow/maxRateSamples {
		if n == maxRateSamples {
			s.samples = append(s.samples[:0], s.samples[1:]...)
		}
		s.samples = append(s.samples, rateSample{at: now, totals: cur})
	}
	return out, nil
}
