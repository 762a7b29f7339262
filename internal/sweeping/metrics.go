package sweeping

import (
	"cmp"
	"context"
	"io"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// The metrics Handle publishes after every invocation, in namespace Metrics.Namespace with the one
// dimension FunctionName=Metrics.Function. infra/alarms.go alarms on them; docs/deploy.md says why.
const (
	// MetricOldestPendingAge is the age in seconds of the oldest event waiting for a worker (pending,
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

// Metrics says where Handle publishes each invocation's metrics.
type Metrics struct {
	// Out receives one CloudWatch Embedded Metric Format line per invocation of Handle (see
	// internal/metrics). The Lambda sets os.Stdout: its stdout is its log group, where CloudWatch
	// extracts the metrics. Nil publishes nothing (the local runner, tests that do not look).
	Out io.Writer
	// Namespace of the metrics. Default DefaultNamespace.
	Namespace string
	// Function is the value of the FunctionName dimension. Default DefaultFunction. The Lambda
	// passes its own name (AWS_LAMBDA_FUNCTION_NAME), unique in its account and region: with a fixed
	// value, two stacks in one account would feed one metric, and one stack's sweeper would hide the
	// other's silence from its alarm.
	Function string
}

// waitingAges is the store's read of the oldest waiting event's age (mysql.Store has it).
type waitingAges interface {
	OldestWaitingAge(ctx context.Context) (time.Duration, error)
}

// publish writes the metric line of one invocation: what the sweep settled, whether it failed, and
// the age of the oldest event still waiting, read after the sweep, so that it measures what the
// sweep left behind. It runs whether the sweep succeeded or not: a failing sweeper must still say so.
func (s *Sweeper) publish(ctx context.Context, res Result, sweepErr error) {
	m := s.cfg.Metrics
	if m.Out == nil {
		return
	}
	failed := 0.0
	if sweepErr != nil {
		failed = 1
	}
	values := []metrics.Value{
		{Name: MetricSettled, Unit: metrics.Count, Value: float64(res.Processed)},
		{Name: MetricSweepErrors, Unit: metrics.Count, Value: failed},
		{Name: MetricRetrying, Unit: metrics.Count, Value: float64(res.Retrying)},
		{Name: MetricFailedEvents, Unit: metrics.Count, Value: float64(res.Failed)},
		{Name: MetricPulseFailures, Unit: metrics.Count, Value: float64(res.PulseFailures)},
	}
	if age, ok := s.oldestAge(ctx); ok {
		values = append(values, metrics.Value{Name: MetricOldestPendingAge, Unit: metrics.Seconds, Value: age.Seconds()})
	}
	line := metrics.Line{
		Namespace:  cmp.Or(m.Namespace, DefaultNamespace),
		Dimensions: []metrics.Dimension{{Name: FunctionNameDimension, Value: cmp.Or(m.Function, DefaultFunction)}},
		Time:       time.Now(),
		Values:     values,
	}
	if err := line.Write(m.Out); err != nil {
		s.cfg.Logger.Error("sweeper: metrics not published", "err", err)
	}
}

// oldestAge reads the oldest waiting event's age within ageReadTimeout and before the deadline's
// margin, and says whether it could.
func (s *Sweeper) oldestAge(ctx context.Context) (time.Duration, bool) {
	store, ok := s.engine.Store.(waitingAges)
	if !ok {
		return 0, false
	}
	budget := ageReadTimeout
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)-publishMargin)
	}
	if budget <= 0 {
		s.cfg.Logger.Warn("sweeper: no time left to read the oldest pending age")
		return 0, false
	}
	rctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	age, err := store.OldestWaitingAge(rctx)
	if err != nil {
		s.cfg.Logger.Warn("sweeper: oldest pending age not read", "err", err)
		return 0, false
	}
	return age, true
}
