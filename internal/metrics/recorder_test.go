package metrics_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/stretchr/testify/require"
)

// The names are a contract with the alarms and the dashboard (infra/) and with whoever scrapes
// /metrics: every EMF name, unit and Prometheus name, as the catalog must have them.
func TestCatalogNames(t *testing.T) {
	want := []struct {
		emf  string
		unit metrics.Unit
		prom string
	}{
		{"EventsCreatedSync", metrics.Count, "exactlyonce_events_created_sync_total"},
		{"EventsCreatedAsync", metrics.Count, "exactlyonce_events_created_async_total"},
		{"IdempotentReplays", metrics.Count, "exactlyonce_idempotent_replays_total"},
		{"EventsProcessed", metrics.Count, "exactlyonce_events_processed_total"},
		{"ClaimBatchSize", metrics.Count, "exactlyonce_claim_batch_size"},
		{"OutcomeBusy", metrics.Count, "exactlyonce_outcome_busy_total"},
		{"OutcomeMissing", metrics.Count, "exactlyonce_outcome_missing_total"},
		{"DeadlockRetries", metrics.Count, "exactlyonce_deadlock_retries_total"},
		{"LockWaitRetries", metrics.Count, "exactlyonce_lock_wait_retries_total"},
		{"TransactionDuration", metrics.Milliseconds, "exactlyonce_transaction_duration_seconds"},
		{"Transactions", metrics.Count, "exactlyonce_transactions_total"},
		{"QueueSends", metrics.Count, "exactlyonce_queue_sends_total"},
		{"QueueSendFailures", metrics.Count, "exactlyonce_queue_send_failures_total"},
		{"PendingEvents", metrics.Count, "exactlyonce_pending_events"},
		{"OldestPendingAgeSeconds", metrics.Seconds, "exactlyonce_oldest_pending_age_seconds"},
		{"Settled", metrics.Count, "exactlyonce_settled_total"},
		{"SweepErrors", metrics.Count, "exactlyonce_sweep_errors_total"},
		{"RetryingEvents", metrics.Count, "exactlyonce_retrying_events_total"},
		{"FailedEvents", metrics.Count, "exactlyonce_failed_events_total"},
		{"PulseFailures", metrics.Count, "exactlyonce_pulse_failures_total"},
		{"CounterMismatches", metrics.Count, "exactlyonce_counter_mismatches_total"},
		{"CounterNotificationsRepublished", metrics.Count, "exactlyonce_counter_notifications_republished_total"},
		{"CounterSweepErrors", metrics.Count, "exactlyonce_counter_sweep_errors_total"},
		{"AgentPulses", metrics.Count, "exactlyonce_agent_pulses_total"},
		{"ShardChanges", metrics.Count, "exactlyonce_shard_changes_total"},
		{"TaskDelivered", metrics.Count, "exactlyonce_task_delivered_total"},
		{"TaskDeliveryFailed", metrics.Count, "exactlyonce_task_delivery_failed_total"},
		{"TaskDeliveryLatency", metrics.Milliseconds, "exactlyonce_task_delivery_latency_seconds"},
		{"CounterApplied", metrics.Count, "exactlyonce_counter_applied_total"},
		{"CounterDuplicates", metrics.Count, "exactlyonce_counter_duplicates_total"},
		{"CounterRejected", metrics.Count, "exactlyonce_counter_rejected_total"},
	}
	require.Len(t, metrics.Catalog, len(want))
	for i, w := range want {
		m := metrics.Metric(i)
		require.Equal(t, w.emf, m.Name())
		require.Equal(t, w.unit, m.Def().Unit, w.emf)
		require.Equal(t, w.prom, m.PromName())
		require.NotEmpty(t, m.Def().Help, w.emf)
	}
}

// The help texts use the project's words, one meaning each: "worker" alone meant a process that
// claims, a claim and an event worker at once; a help text says which (an event worker is the
// registry's record; a claim holds a lease; the processor or an agent claims).
func TestHelpTextsSayNoBareWorker(t *testing.T) {
	for i := range metrics.Catalog {
		m := metrics.Metric(i)
		help := strings.ReplaceAll(strings.ToLower(m.Def().Help), "event worker", "")
		require.NotContains(t, help, "worker", "%s: %q", m.Name(), m.Def().Help)
	}
}

// parse returns the one EMF line r flushes, as JSON.
func flush(t *testing.T, r *metrics.Recorder, function string) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, r.Flush(&buf, function))
	var root map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &root), buf.String())
	require.Equal(t, 1, strings.Count(buf.String(), "\n"))
	return root
}

// A line holds what was recorded since the last one: counters summed, every counter of the part
// even at zero, a gauge and a duration only when recorded, durations as an array of milliseconds;
// the next line starts over.
func TestRecorderLine(t *testing.T) {
	r := metrics.NewRecorder(metrics.PartProcessor, true, nil)
	r.Add(metrics.EventsProcessed, 2)
	r.Add(metrics.EventsProcessed, 1)
	r.Observe(metrics.ClaimBatchSize, 3)
	r.ObserveDuration(metrics.TransactionDuration, 1500*time.Microsecond)
	r.ObserveDuration(metrics.TransactionDuration, 4*time.Millisecond)
	r.Add(metrics.CounterApplied, 0) // not the processor's: published because it was recorded

	line := flush(t, r, "fn-processor")
	require.Equal(t, "fn-processor", line["FunctionName"])
	require.EqualValues(t, 3, line["EventsProcessed"])
	require.Equal(t, []any{3.0}, line["ClaimBatchSize"])
	require.Equal(t, []any{1.5, 4.0}, line["TransactionDuration"])
	require.EqualValues(t, 0, line["OutcomeBusy"], "a counter of the part, at zero")
	require.EqualValues(t, 0, line["CounterApplied"])
	require.NotContains(t, line, "EventsCreatedSync", "another part's, not recorded")
	require.NotContains(t, line, "TaskDeliveryLatency", "a duration not recorded")
	names := map[string]string{}
	for _, d := range line["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Metrics"].([]any) {
		names[d.(map[string]any)["Name"].(string)] = d.(map[string]any)["Unit"].(string)
	}
	require.Equal(t, "Milliseconds", names["TransactionDuration"])
	require.Equal(t, "Count", names["EventsProcessed"])

	line = flush(t, r, "fn-processor")
	require.EqualValues(t, 0, line["EventsProcessed"], "the next line starts over")
	require.NotContains(t, line, "TransactionDuration")
	require.NotContains(t, line, "CounterApplied")
}

// More values than an EMF array holds: 100 of them are published, the largest among them.
func TestRecorderKeepsAtMost100ValuesAndTheMaximum(t *testing.T) {
	r := metrics.NewRecorder(metrics.PartSweeper, true, nil)
	for i := range 1000 {
		r.ObserveDuration(metrics.TransactionDuration, time.Duration(i+1)*time.Millisecond)
	}
	vals := flush(t, r, "s")["TransactionDuration"].([]any)
	require.Len(t, vals, 100)
	require.Contains(t, vals, 1000.0)
}

// A nil Recorder records nothing and never panics; one without EMF writes no line.
func TestNilRecorder(t *testing.T) {
	var r *metrics.Recorder
	r.Add(metrics.EventsProcessed, 1)
	r.Set(metrics.PendingEvents, 1)
	r.Observe(metrics.ClaimBatchSize, 1)
	r.ObserveDuration(metrics.TransactionDuration, time.Second)
	var buf bytes.Buffer
	require.NoError(t, r.Flush(&buf, "x"))
	require.NoError(t, metrics.NewRecorder(metrics.PartAPI, false, nil).Flush(&buf, "x"))
	require.Zero(t, buf.Len())
}

// Recording allocates nothing: it is on the hot paths (every transaction, every claim).
func TestRecordingDoesNotAllocate(t *testing.T) {
	emf := metrics.NewRecorder(metrics.PartAPI, true, nil)
	allocs := testing.AllocsPerRun(100, func() {
		emf.Add(metrics.EventsCreatedSync, 1)
		emf.ObserveDuration(metrics.TransactionDuration, time.Millisecond)
		emf.Set(metrics.PendingEvents, 1)
	})
	require.Zero(t, allocs)
}
