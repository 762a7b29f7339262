package agents_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The standalone agent's stats line says how many pulses it made and how many failed.
func TestStatsLineCountsPulses(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	out := &testutil.Buffer{}
	cfg := memberConfig("stats")
	cfg.Logger = slog.New(slog.NewJSONHandler(out, nil))
	a, err := agents.New(store.Agents, &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper}, agents.Config{Member: cfg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	go a.LogStatsEvery(ctx, 50*time.Millisecond)
	// One stats line of a running agent that has pulsed. Lines written before its first pulse ended
	// (slow on a loaded machine) say pulses 0 and are not the line looked for.
	var line struct {
		Msg, State            string
		Pulses, PulseFailures *int64
	}
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(out.String(), "\n") {
			line.Msg, line.State, line.Pulses, line.PulseFailures = "", "", nil, nil
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "agent: stats" && line.State == "RUNNING" &&
				line.Pulses != nil && *line.Pulses > 0 {
				return true
			}
		}
		return false
	}, time.Minute, 10*time.Millisecond, out.String())
	require.NotNil(t, line.PulseFailures, out.String())
	require.Zero(t, *line.PulseFailures, out.String())
}

// A member's pulses and the changes of its assigned range are counted on the Recorder of the
// pulse's context: alone it takes the whole range (one change); a second member joins and its next
// pulse halves it (a second change); a pulse that changes nothing counts none.
func TestPulsesAndShardChangesAreRecorded(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	rec := metrics.NewRecorder(metrics.PartAgent, true, nil)
	ctx := metrics.With(context.Background(), rec)
	a, err := agents.NewMember(store.Agents, memberConfig("a"))
	require.NoError(t, err)
	b, err := agents.NewMember(store.Agents, memberConfig("b"))
	require.NoError(t, err)
	counts := func() (pulses, changes float64) {
		for _, v := range rec.Values() {
			switch v.Name {
			case "AgentPulses":
				pulses = v.Value
			case "ShardChanges":
				changes = v.Value
			}
		}
		return pulses, changes
	}

	require.NoError(t, a.Pulse(ctx))
	p, c := counts()
	require.Equal(t, 1.0, p)
	require.Equal(t, 1.0, c, "alone: the whole range")
	require.NoError(t, a.Pulse(ctx))
	p, c = counts()
	require.Equal(t, 1.0, p)
	require.Zero(t, c, "nothing changed")

	require.NoError(t, b.Pulse(context.Background())) // b joins; its pulses are not recorded here
	require.NoError(t, a.Pulse(ctx))
	p, c = counts()
	require.Equal(t, 1.0, p)
	require.Equal(t, 1.0, c, "a second member: half the range")
}

// A pulse cut short by its own context (the agent stopping: a Lambda's invocation ends its agent a
// second before its deadline, whatever is in flight) is not a failed pulse: PulseFailures counts
// what went wrong. A pulse that fails on a live context is one.
func TestOnlyAPulseThatFailsOnALiveContextIsAFailure(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	rec := metrics.NewRecorder(metrics.PartAgent, true, nil)
	m, err := agents.NewMember(store.Agents, memberConfig("cut"))
	require.NoError(t, err)
	stopped, cancel := context.WithCancel(metrics.With(context.Background(), rec))
	cancel()
	require.Error(t, m.Pulse(stopped))
	require.Zero(t, m.Stats.PulseFailures.Load(), "a pulse its stop cut short")
	for _, v := range rec.Values() {
		if v.Name == "PulseFailures" {
			require.Zero(t, v.Value, "a pulse its stop cut short")
		}
	}

	broken, err := agents.NewMember(wire.NewStores(testdb.UnreachableCore(t)).Agents, memberConfig("broken"))
	require.NoError(t, err)
	require.Error(t, broken.Pulse(metrics.With(context.Background(), rec)))
	require.EqualValues(t, 1, broken.Stats.PulseFailures.Load())
	failures := 0.0
	for _, v := range rec.Values() {
		if v.Name == "PulseFailures" {
			failures = v.Value
		}
	}
	require.Equal(t, 1.0, failures)
}
