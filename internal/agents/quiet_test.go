package agents_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// records is a slog.Handler that keeps every record, at every level.
type records struct {
	mu  sync.Mutex
	all []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, rec.Clone())
	return nil
}

func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// atLeast returns the records at level or above, one line each.
func (r *records) atLeast(level slog.Level) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.all {
		if rec.Level >= level {
			line := rec.Level.String() + " " + rec.Message
			rec.Attrs(func(a slog.Attr) bool { line += fmt.Sprintf(" %s=%v", a.Key, a.Value); return true })
			out = append(out, line)
		}
	}
	return out
}

// messages returns the messages of every record, at any level.
func (r *records) messages() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, rec := range r.all {
		b.WriteString(rec.Level.String() + " " + rec.Message + "\n")
	}
	return b.String()
}

// An idle system is quiet. A processor's agent (range-less) pulses only while a batch holds it, as a
// Lambda sends nothing between invocations: idle past its expiration, its row expires and the
// sweeper's agent ejects it, and its next batch registers it again. That is how it is meant to work,
// so neither side says more than INFO: the run below (a batch, then idle for several expirations
// while a sweeping agent pulses beside it, then a batch again) logs nothing at WARN or above. It
// logged a WARN (the ejection) and an ERROR (the processor finding itself ejected) before.
func TestAnIdleProcessorAgentExpiresQuietly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	rec := &records{}
	log := slog.New(rec)
	mc := func(name, kind string) agents.MemberConfig {
		return agents.MemberConfig{Name: name, Kind: kind, PulseInterval: testPulse, Expiration: testExpiration, Logger: log}
	}
	sweeper, err := agents.New(store.Agents, &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Logger: log},
		agents.Config{Member: mc("sweeper", "sweeper"), PollInterval: 50 * time.Millisecond, PollJitter: 20 * time.Millisecond})
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sweeper.Run(sctx) }()
	t.Cleanup(func() { stop(); <-done })

	processor, err := agents.NewRangeless(store.Agents, mc("processor", "processor"))
	require.NoError(t, err)
	release, err := processor.Hold(ctx) // a batch
	require.NoError(t, err)
	first := processor.ID()
	release()

	// Idle: the processor's row expires and the sweeper ejects it; then several more expirations
	// pass, counted in the sweeper's pulses.
	require.Eventually(t, func() bool { return !hasAgent(t, store, first) }, time.Minute, 20*time.Millisecond,
		"the idle processor's row was never ejected")
	pulses := sweeper.Member.Stats.Pulses.Load()
	idle := int64(3 * testExpiration / testPulse)
	require.Eventually(t, func() bool { return sweeper.Member.Stats.Pulses.Load() >= pulses+idle }, time.Minute, 20*time.Millisecond)

	release, err = processor.Hold(ctx) // the next batch, after the idle spell
	require.NoError(t, err)
	require.NotEqual(t, first, processor.ID(), "registered again")
	release()
	stop()
	<-done

	require.Equal(t, int64(1), sweeper.Member.Stats.EjectedOthers.Load(), "the sweeper ejected the idle processor")
	require.Equal(t, int64(1), processor.Stats.Ejected.Load(), "the processor found its row gone")
	require.Zero(t, sweeper.Member.Stats.PulseFailures.Load())
	require.Empty(t, rec.atLeast(slog.LevelWarn), "an idle system logged at WARN or above; the whole log:\n%s", rec.messages())
}

// A processor's agent whose row goes while a batch holds it (its pulses could not keep it: the
// database unreachable past its expiration, or an operator deleting it) is not an idle spell: its
// event workers were adopted while it delivered. That is said at ERROR.
func TestAProcessorAgentEjectedWhileHeldIsAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	rec := &records{}
	// A background pulse's deadline is the pulse interval: a second, not testPulse, so that a
	// statement slowed by a loaded machine is not a failed pulse (a second ERROR).
	processor, err := agents.NewRangeless(store.Agents, agents.MemberConfig{Name: "processor", Kind: "processor",
		PulseInterval: time.Second, Expiration: 10 * time.Second, Logger: slog.New(rec)})
	require.NoError(t, err)
	release, err := processor.Hold(ctx)
	require.NoError(t, err)
	defer release()
	first := processor.ID()
	require.NoError(t, store.Agents.RemoveAgent(ctx, first)) // gone while held
	require.Eventually(t, func() bool { return processor.ID() != first && processor.ID() != 0 }, time.Minute, 20*time.Millisecond,
		"its background pulse registers it again")
	errs := rec.atLeast(slog.LevelError)
	require.Len(t, errs, 1, "the whole log:\n%s", rec.messages())
	require.Contains(t, errs[0], "agent: ejected")
}

// A failed pulse is tried again at the next one, and an agent whose pulses keep failing claims
// nothing and says so by its outcome (a sweeper invocation none of whose pulses succeeded fails,
// which SweeperErrors alarms on): each failed pulse is a warning, not a line for a person. An agent
// on an unreachable database, several pulses.
func TestAFailedPulseIsAWarning(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.UnreachableCore(t))
	rec := &records{}
	log := slog.New(rec)
	a, err := agents.New(store.Agents, &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Logger: log},
		agents.Config{Member: agents.MemberConfig{Name: "sweeper", Kind: "sweeper", PulseInterval: testPulse, Expiration: testExpiration, Logger: log},
			PollInterval: 50 * time.Millisecond, PollJitter: 20 * time.Millisecond})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	require.Eventually(t, func() bool { return a.Member.Stats.PulseFailures.Load() >= 3 }, time.Minute, 20*time.Millisecond,
		"it pulses, and fails, more than once")
	stop()
	<-done
	var pulses []string
	for _, line := range rec.atLeast(slog.LevelInfo) {
		if strings.Contains(line, "agent: pulse failed") {
			pulses = append(pulses, line)
			require.True(t, strings.HasPrefix(line, "WARN "), "a failed pulse at %s", line)
		}
	}
	require.NotEmpty(t, pulses, "the failed pulses were said; the whole log:\n%s", rec.messages())
}
