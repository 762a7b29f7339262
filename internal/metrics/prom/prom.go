// Package prom is the Prometheus sink of internal/metrics, for long-running processes (cmd/local,
// cmd/agent): every Catalog metric, named by its PromName, with a label `part`, served on /metrics.
// It is a package of its own so that the Lambda binaries, which publish EMF lines, do not link the
// Prometheus client.
package prom

import (
	"net/http"
	"sync"

	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Registry is the registry of a long-running process: every Catalog metric, named by PromName,
// with a label `part`, and the Go runtime's and the process's metrics. Its Handler serves them on
// /metrics.
type Registry struct {
	Registry *prometheus.Registry
	vecs     [numMetrics]any // *prometheus.CounterVec, *GaugeVec or *HistogramVec

	mu    sync.Mutex
	parts map[metrics.Part]*part
}

const numMetrics = len(metrics.Catalog)

// Buckets of the Prometheus histograms: durations in seconds from 1 ms to 10 s; claim sizes from
// 1 to 1,000 events.
var (
	durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	sizeBuckets     = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
)

// New returns a registry holding every Catalog metric.
func New() *Registry {
	p := &Registry{Registry: prometheus.NewRegistry(), parts: map[metrics.Part]*part{}}
	p.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	labels := []string{"part"}
	for i := range numMetrics {
		m := metrics.Metric(i)
		d := m.Def()
		var c prometheus.Collector
		switch d.Kind {
		case metrics.Counter:
			c = prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.PromName(), Help: d.Help}, labels)
		case metrics.Gauge:
			c = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.PromName(), Help: d.Help}, labels)
		case metrics.Duration:
			c = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.PromName(), Help: d.Help, Buckets: durationBuckets}, labels)
		case metrics.Distribution:
			c = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.PromName(), Help: d.Help, Buckets: sizeBuckets}, labels)
		}
		p.Registry.MustRegister(c)
		p.vecs[m] = c
	}
	return p
}

// Recorder returns a Recorder of part that counts in p (and keeps nothing for EMF).
func (p *Registry) Recorder(part metrics.Part) *metrics.Recorder {
	return metrics.NewRecorder(part, false, p.part(part))
}

// Handler serves the registry in Prometheus's text format (the /metrics endpoint).
func (p *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(p.Registry, promhttp.HandlerOpts{Registry: p.Registry})
}

// part holds a part's series, resolved once: recording is then an atomic operation on the series,
// with no label lookup. The series of the metrics the part publishes are made at once, so that a
// scrape shows them at zero before anything happened. It is the part's metrics.Sink.
type part struct {
	p        *Registry
	part     metrics.Part
	counters [numMetrics]prometheus.Counter
	gauges   [numMetrics]prometheus.Gauge
	hists    [numMetrics]prometheus.Observer
	once     [numMetrics]sync.Once
}

func (p *Registry) part(name metrics.Part) *part {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pp, ok := p.parts[name]; ok {
		return pp
	}
	pp := &part{p: p, part: name}
	for i := range numMetrics {
		if m := metrics.Metric(i); m.PublishedBy(name) {
			pp.resolve(m)
		}
	}
	p.parts[name] = pp
	return pp
}

// resolve makes m's series of the part, once.
func (pp *part) resolve(m metrics.Metric) {
	pp.once[m].Do(func() {
		switch v := pp.p.vecs[m].(type) {
		case *prometheus.CounterVec:
			pp.counters[m] = v.WithLabelValues(string(pp.part))
		case *prometheus.GaugeVec:
			pp.gauges[m] = v.WithLabelValues(string(pp.part))
		case *prometheus.HistogramVec:
			pp.hists[m] = v.WithLabelValues(string(pp.part))
		}
	})
}

// Add adds n to counter m.
func (pp *part) Add(m metrics.Metric, n float64) {
	pp.resolve(m)
	if c := pp.counters[m]; c != nil {
		c.Add(n)
	}
}

// Set sets gauge m.
func (pp *part) Set(m metrics.Metric, v float64) {
	pp.resolve(m)
	if g := pp.gauges[m]; g != nil {
		g.Set(v)
	}
}

// Observe records one value of histogram m.
func (pp *part) Observe(m metrics.Metric, v float64) {
	pp.resolve(m)
	if h := pp.hists[m]; h != nil {
		h.Observe(v)
	}
}

// Total returns the current total of counter m of part: all that part's Recorders have added since
// New. It is 0 when the part has recorded nothing, and for a metric that is not a counter or that
// the part does not publish (reading one must not make its series appear on /metrics). For the
// console's rates (internal/console), which take the difference of two totals.
func (p *Registry) Total(m metrics.Metric, part metrics.Part) float64 {
	if int(m) >= numMetrics || m.Def().Kind != metrics.Counter || !m.PublishedBy(part) {
		return 0
	}
	p.mu.Lock()
	pp := p.parts[part]
	p.mu.Unlock()
	if pp == nil {
		return 0
	}
	// A published metric's series was made before the part was put in the map, under p.mu.
	var out dto.Metric
	if err := pp.counters[m].Write(&out); err != nil {
		return 0
	}
	return out.GetCounter().GetValue()
}
