package sweeping_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/wire"

	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// lines is an io.Writer that keeps what Handle publishes.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// published returns the EMF lines written so far, each parsed as a JSON object, and checks what
// every line of the sweeper must hold: the namespace, the FunctionName dimension, and a member
// for each metric the directive names (and no metric member the directive does not name).
func (l *lines) published(t *testing.T, function string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, raw := range strings.SplitAfter(l.buf.String(), "\n") {
		if raw == "" {
			continue
		}
		require.True(t, strings.HasSuffix(raw, "\n"), "a line ends with a newline: %q", raw)
		var root map[string]any
		require.NoError(t, json.Unmarshal([]byte(raw), &root), "each line is one JSON object: %q", raw)
		aws := root["_aws"].(map[string]any)
		require.NotZero(t, aws["Timestamp"])
		d := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
		require.Equal(t, sweeping.DefaultNamespace, d["Namespace"])
		require.Equal(t, []any{[]any{sweeping.FunctionNameDimension}}, d["Dimensions"])
		require.Equal(t, function, root[sweeping.FunctionNameDimension])
		named := map[string]bool{}
		for _, m := range d["Metrics"].([]any) {
			name := m.(map[string]any)["Name"].(string)
			named[name] = true
			require.Contains(t, root, name, "metric %s has a value", name)
		}
		for _, name := range []string{sweeping.MetricOldestPendingAge, sweeping.MetricSettled, sweeping.MetricSweepErrors} {
			_, has := root[name]
			require.Equal(t, named[name], has, "metric %s is named in the directive exactly when it has a value", name)
		}
		out = append(out, root)
	}
	return out
}

func backdate(t *testing.T, store *wire.Stores, by time.Duration) {
	t.Helper()
	_, err := store.DB.Pool().Exec("UPDATE events SET created_at = NOW(6) - INTERVAL ? MICROSECOND WHERE state = 0", by.Microseconds())
	require.NoError(t, err)
}

// Every invocation publishes one line: what it settled, no error, and the age of the oldest event
// it left waiting (0 once everything is settled).
//
// Each invocation here must pulse (an invocation with no successful pulse fails) and have time to
// read the age, so each gets workWindow: with 300 ms, a database stalled by a parallel suite left
// the last line without its age ("no time left to read the waiting events"). The invocation that
// leaves events waiting runs on a database of its own beside the other two, so that the test lasts
// two windows, not three.
func TestHandleAgentPublishesOneMetricLinePerInvocation(t *testing.T) {
	t.Parallel()
	// Events younger than the grace period are left to the queue path: the age is of what is left.
	left := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	pending(t, left, 3)
	backdate(t, left, 5*time.Minute)
	leftOut := &lines{}
	waiting := sweeping.New(left.Sweeping(), scheduled(sweeping.Config{Grace: new(time.Hour), Logger: quietLogger(),
		Metrics: sweeping.Metrics{Out: leftOut, Function: "ExactlyOnce-SweeperFunction"}}))
	var leftErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, leftErr = invoke(waiting, workWindow)
	}()

	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	pending(t, store, 3)
	out := &lines{}
	all := sweeping.New(store.Sweeping(), scheduled(sweeping.Config{Grace: new(time.Duration(0)), Logger: quietLogger(),
		Metrics: sweeping.Metrics{Out: out, Function: "ExactlyOnce-SweeperFunction"}}))
	res, err := invoke(all, workWindow)
	require.NoError(t, err)
	require.Equal(t, 3, res.Processed)
	_, err = invoke(all, workWindow)
	require.NoError(t, err)
	wg.Wait()
	require.NoError(t, leftErr)

	got := leftOut.published(t, "ExactlyOnce-SweeperFunction")
	require.Len(t, got, 1, "one line per invocation")
	require.EqualValues(t, 0, got[0][sweeping.MetricSettled])
	require.EqualValues(t, 0, got[0][sweeping.MetricSweepErrors])
	age := got[0][sweeping.MetricOldestPendingAge].(float64)
	require.GreaterOrEqual(t, age, 300.0, "the events the sweep left are 5 minutes old")
	require.Less(t, age, 330.0)

	got = out.published(t, "ExactlyOnce-SweeperFunction")
	require.Len(t, got, 2, "one line per invocation")
	require.EqualValues(t, 3, got[0][sweeping.MetricSettled])
	require.EqualValues(t, 0, got[0][sweeping.MetricSweepErrors])
	require.EqualValues(t, 0, got[0][sweeping.MetricOldestPendingAge], "nothing waits after the sweep")

	require.EqualValues(t, 0, got[1][sweeping.MetricSettled])
	require.EqualValues(t, 0, got[1][sweeping.MetricOldestPendingAge])
}

// A sweep that fails still publishes: an error, and no age, since the database that failed the
// sweep could not say it either (the alarm on the age treats the missing value as breaching).
func TestHandleAgentPublishesWhenTheSweepFails(t *testing.T) {
	t.Parallel()
	out := &lines{}
	s := sweeping.New(wire.NewStores(testdb.UnreachableCore(t)).Sweeping(), scheduled(sweeping.Config{Logger: quietLogger(),
		Metrics: sweeping.Metrics{Out: out}}))
	for range 2 {
		_, err := invoke(s, 300*time.Millisecond)
		require.Error(t, err, "no pulse succeeded")
	}
	got := out.published(t, sweeping.DefaultFunction)
	require.Len(t, got, 2, "one line per invocation, failed or not")
	for _, line := range got {
		require.EqualValues(t, 1, line[sweeping.MetricSweepErrors])
		require.EqualValues(t, 0, line[sweeping.MetricSettled])
		require.NotContains(t, line, sweeping.MetricOldestPendingAge, "an age that could not be read is left out")
	}
}

// With less time left than the margin kept for writing the line, the age is not read (a database
// that hangs could hold the read past the deadline, and Lambda would end the invocation before the
// line is written): the line is published without it.
func TestHandleAgentPublishesBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	out := &lines{}
	s := sweeping.New(wire.NewStores(testdb.UnreachableCore(t)).Sweeping(), sweeping.Config{Metrics: sweeping.Metrics{Out: out},
		AgentStopBefore: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := s.HandleAgent(ctx, sweeping.ShardInput{})
	require.NoError(t, err)
	require.True(t, res.Stopped)
	got := out.published(t, sweeping.DefaultFunction)
	require.Len(t, got, 1)
	require.EqualValues(t, 0, got[0][sweeping.MetricSweepErrors])
	require.NotContains(t, got[0], sweeping.MetricOldestPendingAge, "no time was left to read the age")
}

// infra/alarms.go and infra/counters.go alarm on these names, in a module of their own that cannot
// import this package: renaming one here without renaming it there would leave the alarm on a metric nobody publishes
// (which it would report as breaching, but for the wrong reason).
func TestMetricNamesAreTheOnesTheAlarmWatches(t *testing.T) {
	require.Equal(t, "ExactlyOnce", sweeping.DefaultNamespace)
	require.Equal(t, "OldestPendingAgeSeconds", sweeping.MetricOldestPendingAge)
	require.Equal(t, "FunctionName", sweeping.FunctionNameDimension)
	// infra/counters.go's alarms too.
	require.Equal(t, "CounterMismatches", sweeping.MetricCounterMismatches)
	require.Equal(t, "CounterSweepErrors", sweeping.MetricCounterSweepErrors)
	// And they are the catalog's, which every part records through.
	require.Equal(t, metrics.Namespace, sweeping.DefaultNamespace)
	require.Equal(t, metrics.FunctionNameDimension, sweeping.FunctionNameDimension)
	for name, m := range map[string]metrics.Metric{sweeping.MetricOldestPendingAge: metrics.OldestPendingAge,
		sweeping.MetricSettled: metrics.Settled, sweeping.MetricSweepErrors: metrics.SweepErrors,
		sweeping.MetricRetrying: metrics.RetryingEvents, sweeping.MetricFailedEvents: metrics.FailedEvents,
		sweeping.MetricPulseFailures: metrics.PulseFailures, sweeping.MetricCounterMismatches: metrics.CounterMismatches,
		sweeping.MetricCounterRepublished: metrics.CounterRepublished, sweeping.MetricCounterSweepErrors: metrics.CounterSweepErrors} {
		require.Equal(t, name, m.Name())
	}
}

// An event whose work fails is counted as retrying while it waits its backoff, and as failed once
// it is failed for good: the metric that makes a bad event visible without reading the table.
func TestHandleAgentPublishesRetryingAndFailedEvents(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	var bad int64
	for i := range 3 {
		id, err := store.Events.CreatePending(ctx)
		require.NoError(t, err)
		if i == 1 {
			bad = id
		}
	}
	out := &lines{}
	// A backoff of up to an hour, so that the first invocation, which claims for its whole window,
	// tries the bad event once; the test then ends its backoff by hand for the second.
	s := sweeping.New(store.Sweeping(), scheduled(sweeping.Config{Grace: new(time.Duration(0)), Logger: testLogger(t),
		Engine: processing.Engine{Works: exactlyonce.Works{exactlyonce.KindPlain: failFor{id: bad}},
			Backoff: exactlyonce.Backoff{MaxAttempts: 2, Base: time.Hour, Max: time.Hour}},
		Metrics: sweeping.Metrics{Out: out, Function: "f"}}))
	_, err := invoke(s, workWindow)
	require.NoError(t, err)
	e, err := store.Events.Get(ctx, bad)
	require.NoError(t, err)
	require.NotNil(t, e.NextAttemptAt, "it waits its backoff")
	_, err = store.DB.Pool().ExecContext(ctx, "UPDATE events SET next_attempt_at = NOW(6) - INTERVAL 1 SECOND WHERE id = ?", bad)
	require.NoError(t, err)
	_, err = invoke(s, workWindow)
	require.NoError(t, err)
	got := out.published(t, "f")
	require.Len(t, got, 2)
	require.EqualValues(t, 2, got[0][sweeping.MetricSettled])
	require.EqualValues(t, 1, got[0][sweeping.MetricRetrying])
	require.EqualValues(t, 0, got[0][sweeping.MetricFailedEvents])
	require.EqualValues(t, 0, got[1][sweeping.MetricRetrying])
	require.EqualValues(t, 1, got[1][sweeping.MetricFailedEvents])
}
