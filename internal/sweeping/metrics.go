package sweeping

import (
	"cmp"
	"context"
	"io"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// The metrics HandleAgent publishes after every invocation, in namespace Metrics.Namespace with the one
// dimension FunctionName=Metrics.Function. infra/alarms.go alarms on them; docs/deploy.md says why.
// They are the names of their definitions in internal/metrics's Catalog, where every metric of every
// part is defined; the line of an invocation holds all of the sweeper's (PendingEvents,
// EventsProcessed, ClaimBatchSize, AgentPulses, ...), not only these.
const (
	// MetricOldestPendingAge is the age in seconds of the oldest event waiting to be claimed (pending,
	// or leased with an expired lease), read after the sweep: 0 when nothing waits. Left out of the
	// line when it could not be read (the database unreachable): the alarm treats the missing
	// datapoint as breaching, as it does when the sweeper does not run at all.
	MetricOldestPendingAge = "OldestPendingAgeSeconds"
	// MetricSettled is the number of events the sweep settled (those of a failed sweep's batches
	// that committed, too).
	MetricSettled = "Settled"
	// MetricSweepErrors is 1 when the sweep failed, else 0.
	MetricSweepErrors = "SweepErrors"
	// MetricRetrying is the number of events whose work failed in this sweep and that wait their
	// backoff; MetricFailedEvents those whose work failed for the last allowed time, now settled as
	// failed with their error (GET /events/{id} shows it).
	MetricRetrying     = "RetryingEvents"
	MetricFailedEvents = "FailedEvents"
	// MetricPulseFailures is the number of the sweeper agent's pulses that failed (HandleAgent):
	// while its pulse fails an agent claims nothing.
	MetricPulseFailures = "PulseFailures"

	// DefaultNamespace is Metrics.Namespace's default.
	DefaultNamespace = "ExactlyOnce"
	// FunctionNameDimension is the name of the metrics' one dimension, as in AWS/Lambda's metrics.
	FunctionNameDimension = "FunctionName"
	// DefaultFunction is Metrics.Function's default.
	DefaultFunction = "sweeper"
)

// ageReadTimeout bounds the read of the oldest age, and publishMargin is kept before the
// invocation's deadline for writing the line: a database that hangs must not keep the line from
// being written before Lambda ends the invocation.
const (
	ageReadTimeout = 5 * time.Second
	publishMargin  = 500 * time.Millisecond
)

// Metrics says where HandleAgent publishes each invocation's metrics.
type Metrics struct {
	// Out receives one CloudWatch Embedded Metric Format line per invocation of HandleAgent (see
	// internal/metrics). The Lambda sets os.Stdout: its stdout is its log group, where CloudWatch
	// extracts the metrics. Nil writes no line (the local runner, tests that do not look).
	Out io.Writer
	// Namespace of the metrics. Default DefaultNamespace.
	Namespace string
	// Function is the value of the FunctionName dimension. Default DefaultFunction. The Lambda
	// passes its own name (AWS_LAMBDA_FUNCTION_NAME), unique in its account and region: with a fixed
	// value, two stacks in one account would feed one metric, and one stack's sweeper would hide the
	// other's silence from its alarm.
	Function string
	// Recorder is where the sweeper records (and what the line of an invocation drains): the
	// Lambda's (wire.Invocation), or the local runner's Prometheus one. Nil: one of the sweeper's
	// own when Out is set, else nothing is recorded.
	Recorder *metrics.Recorder
}

// Waiting reads the events waiting to be claimed (internal/mysql/eventstore implements it): the
// oldest one's age and their count, which the sweeper publishes after every invocation.
type Waiting interface {
	OldestWaitingAge(ctx context.Context) (time.Duration, error)
	WaitingEvents(ctx context.Context) (int64, error)
}

// publish records what one invocation's sweep did (settled, failed or not, retrying and failed
// events) and the waiting events' count and oldest age, read after the sweep, so that they measure
// what the sweep left behind; then it writes the invocation's line, which holds as well what the
// engine, the store and the agent recorded during it. It runs whether the sweep succeeded or not: a
// failing sweeper must still say so.
func (s *Sweeper) publish(ctx context.Context, res Result, sweepErr error) {
	rec := s.rec
	if rec == nil {
		return
	}
	failed := 0
	if sweepErr != nil {
		failed = 1
	}
	rec.Add(metrics.Settled, res.Processed)
	rec.Add(metrics.SweepErrors, failed)
	rec.Add(metrics.RetryingEvents, res.Retrying)
	rec.Add(metrics.FailedEvents, res.Failed)
	// What the agent's maintenance read during the invocation is not what the sweep left behind.
	rec.Unset(metrics.OldestPendingAge)
	rec.Unset(metrics.PendingEvents)
	s.readWaiting(ctx, rec)
	m := s.cfg.Metrics
	if m.Out == nil {
		return
	}
	line := rec.Line(cmp.Or(m.Namespace, DefaultNamespace), cmp.Or(m.Function, DefaultFunction), time.Now())
	if err := line.Write(m.Out); err != nil {
		s.cfg.Logger.Error("sweeper: metrics not published", "err", err)
	}
}

// readWaiting sets the gauges of the waiting events (OldestPendingAgeSeconds, PendingEvents) on
// rec, each left unset when it could not be read within ageReadTimeout and before the deadline's
// margin: a missing datapoint, which the alarm treats as breaching.
func (s *Sweeper) readWaiting(ctx context.Context, rec *metrics.Recorder) {
	if age, ok := s.oldestAge(ctx); ok {
		rec.Set(metrics.OldestPendingAge, age.Seconds())
		if n, ok := s.waiting(ctx); ok {
			rec.Set(metrics.PendingEvents, float64(n))
		}
	}
}

// readBudget returns a context for one read of the waiting events, bounded by ageReadTimeout and
// the deadline's margin; nil when no time is left.
func (s *Sweeper) readBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	budget := ageReadTimeout
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)-publishMargin)
	}
	if budget <= 0 {
		s.cfg.Logger.Warn("sweeper: no time left to read the waiting events")
		return nil, nil
	}
	return context.WithTimeout(ctx, budget)
}

// oldestAge reads the oldest waiting event's age, and says whether it could.
func (s *Sweeper) oldestAge(ctx context.Context) (time.Duration, bool) {
	if s.stores.Waiting == nil {
		return 0, false
	}
	return readWithin(ctx, s, s.stores.Waiting.OldestWaitingAge, "sweeper: oldest pending age not read")
}

// waiting counts the waiting events, and says whether it could.
func (s *Sweeper) waiting(ctx context.Context) (int64, bool) {
	if s.stores.Waiting == nil {
		return 0, false
	}
	return readWithin(ctx, s, s.stores.Waiting.WaitingEvents, "sweeper: waiting events not counted")
}

// readWithin runs one read of the waiting events within readBudget, and says whether it answered;
// a failure is logged with failed.
func readWithin[T any](ctx context.Context, s *Sweeper, read func(context.Context) (T, error), failed string) (T, bool) {
	var zero T
	rctx, cancel := s.readBudget(ctx)
	if rctx == nil {
		return zero, false
	}
	defer cancel()
	v, err := read(rctx)
	if err != nil {
		if ctx.Err() == nil { // a stop cut it short: not a failure
			s.cfg.Logger.Warn(failed, "err", err)
		}
		return zero, false
	}
	return v, true
}
