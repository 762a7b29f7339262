package sweeping_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/counterstore"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// recorder is a publisher that keeps what it is given, and fails while failing is set.
type recorder struct {
	mu      sync.Mutex
	got     map[string][]byte
	failing bool
}

func (r *recorder) Publish(_ context.Context, ns []counters.Notification) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing {
		return nil, errors.New("topic unreachable")
	}
	if r.got == nil {
		r.got = map[string][]byte{}
	}
	var ids []string
	for _, n := range ns {
		r.got[n.ID] = n.Body
		ids = append(ids, n.ID)
	}
	return ids, nil
}

func counterMessages(n int) []exactlyonce.CounterMessage {
	var ms []exactlyonce.CounterMessage
	for i := range n {
		ms = append(ms, exactlyonce.CounterMessage{EntityID: string(rune('a' + i)), EntityType: "t", UserID: "u", Action: exactlyonce.CounterAdded})
	}
	return ms
}

// Notifications that were recorded but never published (the consumer's publish failed, or it
// died after its commit) are published by the sweep, once it succeeds, and then not again.
func TestCounterSweepPublishesWhatWasNotPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	pub := &recorder{failing: true}
	results, err := store.Counters.ApplyCounterMessages(ctx, counterMessages(7))
	require.NoError(t, err)

	cfg := sweeping.Counters{Publisher: pub, RepublishAfter: -1, Batch: 3}
	var logs logged
	res := sweeping.SweepCounters(ctx, store.Counters, cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	require.Equal(t, 1, res.Errors, "the publish failed")
	require.Zero(t, res.Republished)
	// The next sweep tries again: a warning; a step that keeps failing is the alarm's
	// (CounterSweepErrors), not a line at ERROR each minute.
	require.Equal(t, []string{"WARN"}, logs.levels(t, "sweeper: counter republish failed; the next sweep tries again"))

	pub.failing = false
	res = sweeping.SweepCounters(ctx, store.Counters, cfg, nil)
	require.Zero(t, res.Errors)
	require.Equal(t, 7, res.Republished)
	require.Len(t, pub.got, 7)
	for _, r := range results {
		var got exactlyonce.CounterResult
		require.NoError(t, json.Unmarshal(pub.got[r.ID], &got))
		require.Equal(t, r, got)
	}
	res = sweeping.SweepCounters(ctx, store.Counters, cfg, nil)
	require.Zero(t, res.Republished, "published ones are not published again")

	// Young notifications are left to their consumer.
	_, err = store.Counters.ApplyCounterMessages(ctx, counterMessages(2))
	require.NoError(t, err)
	res = sweeping.SweepCounters(ctx, store.Counters, sweeping.Counters{Publisher: pub}, nil)
	require.Zero(t, res.Republished)
}

// A count broken on purpose is reported by the sweeper's reconciliation: an error log line naming
// it and a metric.
func TestSweeperReportsABrokenCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	_, err := store.Counters.ApplyCounterMessages(ctx, counterMessages(3))
	require.NoError(t, err)
	_, err = store.DB.Pool().ExecContext(ctx, "UPDATE t_counter_sum SET sum = 2")
	require.NoError(t, err)

	var logs logged
	var out bytes.Buffer
	// Every bucket is sampled, so the broken count is found on the first sweep.
	s := sweeping.New(store.Sweeping(), scheduled(sweeping.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Metrics:  sweeping.Metrics{Out: &out},
		Counters: &sweeping.Counters{SampleBuckets: counterstore.CounterBuckets, SampleCounts: 100}}))
	// The invocation's agent runs the maintenance, the counter service's sweep with it, at its
	// first pause.
	_, err = invoke(s, workWindow)
	require.NoError(t, err)
	require.Equal(t, []string{"ERROR"}, logs.levels(t, "sweeper: a count differs from its entities"))
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		if v, ok := m[sweeping.MetricCounterMismatches]; ok {
			require.Equal(t, 1.0, v)
			found = true
		}
	}
	require.True(t, found, "a line with the mismatch metric: %s", out.String())
}
