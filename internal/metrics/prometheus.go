package metrics

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Prometheus is the registry of a long-running process (cmd/local, cmd/agent): every Catalog metric,
// named by PromName, with a label `part`, and the Go runtime's and the process's metrics. Its
// Handler serves them on /metrics.
type Prometheus struct {
	Registry *prometheus.Registry
	vecs     [numMetrics]any // *prometheus.CounterVec, *GaugeVec or *HistogramVec

	mu    sync.Mutex
	parts map[Part]*promPart
}

// Buckets of the Prometheus histograms: durations in seconds from 1 ms to 10 s; claim sizes from
// 1 to 1,000 events.
var (
	durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	sizeBuckets     = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
)

// NewPrometheus returns a registry holding every Catalog metric.
func NewPrometheus() *Prometheus {
	p := &Prometheus{Registry: prometheus.NewRegistry(), parts: map[Part]*promPart{}}
	p.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	labels := []string{"part"}
	for m := range numMetrics {
		d := Catalog[m]
		var c prometheus.Collector
		switch d.Kind {
		case Counter:
			c = prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.PromName(), Help: d.Help}, labels)
		case Gauge:
			c = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.PromName(), Help: d.Help}, labels)
		case Duration:
			c = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.PromName(), Help: d.Help, Buckets: durationBuckets}, labels)
		case Distribution:
			c = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.PromName(), Help: d.Help, Buckets: sizeBuckets}, labels)
		}
		p.Registry.MustRegister(c)
		p.vecs[m] = c
	}
	return p
}

// Recorder returns a Recorder of part that counts in p (and keeps nothing for EMF).
func (p *Prometheus) Recorder(part Part) *Recorder { return NewRecorder(part, false, p) }

// Handler serves the registry in Prometheus's text format (the /metrics endpoint).
func (p *Prometheus) Handler() http.Handler {
	return promhttp.HandlerFor(p.Registry, promhttp.HandlerOpts{Registry: p.Registry})
}

// promPart holds a part's series, resolved once: recording is then an atomic operation on the
// series, with no label lookup. The series of the metrics the part publishes are made at once, so
// that a scrape shows them at zero before anything happened.
type promPart struct {
	p        *Prometheus
	part     Part
	counters [numMetrics]prometheus.Counter
	gauges   [numMetrics]prometheus.Gauge
	hists    [numMetrics]prometheus.Observer
	once     [numMetrics]sync.Once
}

func (p *Prometheus) part(part Part) *promPart {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pp, ok := p.parts[part]; ok {
		return pp
	}
	pp := &promPart{p: p, part: part}
	for m := range numMetrics {
		if m.publishes(part) {
			pp.resolve(m)
		}
	}
	p.parts[part] = pp
	return pp
}

// resolve makes m's series of the part, once.
func (pp *promPart) resolve(m Metric) {
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

func (pp *promPart) add(m Metric, n float64) {
	pp.resolve(m)
	if c := pp.counters[m]; c != nil {
		c.Add(n)
	}
}

func (pp *promPart) set(m Metric, v float64) {
	pp.resolve(m)
	if g := pp.gauges[m]; g != nil {
		g.Set(v)
	}
}

func (pp *promPart) observe(m Metric, v float64) {
	pp.resolve(m)
	if h := pp.hists[m]; h != nil {
		h.Observe(v)
	}
}
