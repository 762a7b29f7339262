package metrics

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// maxSamples is the most values an EMF line holds for one metric (the specification's bound on a
// metric's array of values).
const maxSamples = 100

// Recorder is where one part records its metrics, through the Catalog, for its sinks: an EMF line
// per Lambda invocation (Line, Flush), and a Prometheus registry (internal/metrics/prom) in
// long-running processes. Recording is cheap and never blocks on I/O: an atomic add per counter, a short mutex
// around a fixed array per duration, no allocation. A nil *Recorder records nothing, so that a part
// built without metrics (most tests) needs no check.
type Recorder struct {
	part Part
	emf  bool
	sink Sink

	// Since the last Line (EMF only).
	counts  [numMetrics]atomic.Int64
	gauges  [numMetrics]atomic.Uint64 // math.Float64bits
	touched [numMetrics]atomic.Bool
	mu      sync.Mutex
	samples [numMetrics]*reservoir
}

// reservoir keeps up to maxSamples of a line's values of one metric: all of them when there are
// that few, else a uniform sample (Algorithm R) in which the largest value is kept, so that the
// Maximum statistic stays true.
type reservoir struct {
	vals [maxSamples]float64
	n    int // values seen
	max  float64
}

func (s *reservoir) add(v float64) {
	if s.n == 0 || v > s.max {
		s.max = v
	}
	if s.n < maxSamples {
		s.vals[s.n] = v
	} else if j := rand.IntN(s.n + 1); j < maxSamples {
		s.vals[j] = v
	}
	s.n++
}

// Sink is where a Recorder also sends what it records, as it records it: the Prometheus registry of
// a long-running process (internal/metrics/prom). Durations reach it in seconds.
type Sink interface {
	Add(m Metric, n float64)
	Set(m Metric, v float64)
	Observe(m Metric, v float64)
}

// NewRecorder returns a Recorder for part that keeps what it records for Line (emf) and/or sends it
// to sink (nil: none).
func NewRecorder(part Part, emf bool, sink Sink) *Recorder {
	r := &Recorder{part: part, emf: emf, sink: sink}
	if emf {
		for m, d := range Catalog {
			if d.Kind == Duration || d.Kind == Distribution {
				r.samples[m] = &reservoir{}
			}
		}
	}
	return r
}

// Part returns the part r records for.
func (r *Recorder) Part() Part { return r.part }

// Add adds n to counter m. Adding 0 still marks m as measured in this invocation.
func (r *Recorder) Add(m Metric, n int) {
	if r == nil {
		return
	}
	if r.emf {
		r.counts[m].Add(int64(n))
		r.touched[m].Store(true)
	}
	if r.sink != nil {
		r.sink.Add(m, float64(n))
	}
}

// Set sets gauge m to v.
func (r *Recorder) Set(m Metric, v float64) {
	if r == nil {
		return
	}
	if r.emf {
		r.gauges[m].Store(math.Float64bits(v))
		r.touched[m].Store(true)
	}
	if r.sink != nil {
		r.sink.Set(m, v)
	}
}

// Unset forgets gauge m's value for the next line (not Prometheus's: a gauge there keeps its last
// value): a value read earlier in an invocation must not pass for one read at its end.
func (r *Recorder) Unset(m Metric) {
	if r != nil && r.emf {
		r.touched[m].Store(false)
	}
}

// Observe records one value of distribution m, in its unit.
func (r *Recorder) Observe(m Metric, v float64) {
	if r == nil {
		return
	}
	if r.emf {
		r.mu.Lock()
		r.samples[m].add(v)
		r.mu.Unlock()
		r.touched[m].Store(true)
	}
	if r.sink != nil {
		r.sink.Observe(m, v)
	}
}

// ObserveDuration records one duration of duration metric m: milliseconds on EMF, seconds on
// Prometheus.
func (r *Recorder) ObserveDuration(m Metric, d time.Duration) {
	if r == nil {
		return
	}
	if r.emf {
		r.mu.Lock()
		r.samples[m].add(float64(d) / float64(time.Millisecond))
		r.mu.Unlock()
		r.touched[m].Store(true)
	}
	if r.sink != nil {
		r.sink.Observe(m, d.Seconds())
	}
}

// Values returns what was recorded since the last Values (or Line), and starts over: every metric
// of r's part (counters at zero when nothing was recorded), and any other metric that was recorded.
// A gauge or a distribution that was not recorded is left out: not measured is not zero. Nil when r
// keeps nothing for EMF.
func (r *Recorder) Values() []Value {
	if r == nil || !r.emf {
		return nil
	}
	var out []Value
	r.mu.Lock()
	defer r.mu.Unlock()
	for m := range numMetrics {
		d := Catalog[m]
		touched := r.touched[m].Swap(false)
		switch d.Kind {
		case Counter:
			n := r.counts[m].Swap(0)
			if touched || m.PublishedBy(r.part) {
				out = append(out, Value{Name: d.Name, Unit: d.Unit, Value: float64(n)})
			}
		case Gauge:
			if touched {
				out = append(out, Value{Name: d.Name, Unit: d.Unit, Value: math.Float64frombits(r.gauges[m].Load())})
			}
		default:
			s := r.samples[m]
			if s.n == 0 {
				continue
			}
			vals := append([]float64(nil), s.vals[:min(s.n, maxSamples)]...)
			if s.n > maxSamples && !contains(vals, s.max) {
				vals[0] = s.max
			}
			out = append(out, Value{Name: d.Name, Unit: d.Unit, Values: vals})
			*s = reservoir{}
		}
	}
	return out
}

func contains(vals []float64, v float64) bool {
	for _, x := range vals {
		if x == v {
			return true
		}
	}
	return false
}

// Line returns the EMF line of what was recorded since the last one (Values), in namespace with
// the one dimension FunctionName=function, at t.
func (r *Recorder) Line(namespace, function string, t time.Time) Line {
	return Line{Namespace: namespace, Dimensions: []Dimension{{Name: FunctionNameDimension, Value: function}},
		Time: t, Values: r.Values()}
}

// Flush writes the EMF line of what was recorded since the last one to w (nothing when nothing is
// kept for EMF), in Namespace under FunctionName=function.
func (r *Recorder) Flush(w io.Writer, function string) error {
	if r == nil || !r.emf || w == nil {
		return nil
	}
	return r.Line(Namespace, function, time.Now()).Write(w)
}

// Namespace is the CloudWatch namespace of every metric; FunctionNameDimension the name of their one
// dimension, as in AWS/Lambda's metrics: its value is the function's own name
// (AWS_LAMBDA_FUNCTION_NAME), unique in its account and region, so that two stacks in one account
// never feed one metric.
const (
	Namespace             = "ExactlyOnce"
	FunctionNameDimension = "FunctionName"
)

type ctxKey struct{}

// With returns ctx carrying r: what the code under ctx records (the store's retries and
// transaction durations, the engine's claims) goes to r.
func With(ctx context.Context, r *Recorder) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, r)
}

// From returns the Recorder ctx carries, or nil (which records nothing).
func From(ctx context.Context) *Recorder {
	r, _ := ctx.Value(ctxKey{}).(*Recorder)
	return r
}
