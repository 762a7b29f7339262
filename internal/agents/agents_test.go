package agents_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Fast intervals for tests: a pulse every 200 ms, ejected after 3 s. (After 1 s, a live agent whose
// pulses a loaded machine stalled for a moment was ejected, and tests that follow one agent lost it.)
const (
	testPulse      = 200 * time.Millisecond
	testExpiration = 3 * time.Second
)

func memberConfig(name string) agents.MemberConfig {
	return agents.MemberConfig{Name: name, Kind: "test", PulseInterval: testPulse, Expiration: testExpiration}
}

// startAgent runs an agent on store until the test ends (or stop is called), reporting to rep.
func startAgent(t *testing.T, store *wire.Stores, cfg agents.Config, rep processing.Reporter) (a *agents.Agent, stop func()) {
	t.Helper()
	cfg.PollInterval = 50 * time.Millisecond
	cfg.PollJitter = 20 * time.Millisecond
	a, err := agents.New(store.Agents, &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Report: rep}, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return a, stop
}

// overlaps returns a description of two RUNNING agents whose ranges overlap, or "".
func overlaps(as []exactlyonce.Agent) string {
	var running []exactlyonce.Agent
	for _, a := range as {
		if a.State == exactlyonce.AgentRunning {
			running = append(running, a)
		}
	}
	for i, a := range running {
		ra, err := exactlyonce.ShardRange(*a.AssignedShardIndex, *a.TotalShardCount)
		if err != nil {
			return fmt.Sprintf("agent %d runs an impossible shard: %v", a.ID, err)
		}
		for _, b := range running[i+1:] {
			rb, _ := exactlyonce.ShardRange(*b.AssignedShardIndex, *b.TotalShardCount)
			if ra.Lo <= rb.Hi && rb.Lo <= ra.Hi {
				return fmt.Sprintf("agents %d (shard %d of %d, %s) and %d (shard %d of %d, %s) both RUNNING", a.ID,
					*a.AssignedShardIndex, *a.TotalShardCount, ra, b.ID, *b.AssignedShardIndex, *b.TotalShardCount, rb)
			}
		}
	}
	return ""
}

// converged tells whether the table holds exactly n agents, all RUNNING with shards 0..n-1 of n.
func converged(as []exactlyonce.Agent, n int) bool {
	if len(as) != n {
		return false
	}
	for i, a := range as {
		if a.State != exactlyonce.AgentRunning || !a.Assigned(n, i) {
			return false
		}
	}
	return true
}

// sampler reads the agents table continuously until stopped, failing on any moment where two
// RUNNING agents' ranges overlap, and returns the samples it took.
func sampler(t *testing.T, store *wire.Stores) (stop func() int) {
	t.Helper()
	var (
		samples atomic.Int64
		failure atomic.Value
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			as, err := store.Agents.Agents(ctx)
			if err != nil {
				continue
			}
			samples.Add(1)
			if o := overlaps(as); o != "" && failure.Load() == nil {
				failure.Store(o)
			}
		}
	}()
	return func() int {
		cancel()
		<-done
		if f := failure.Load(); f != nil {
			t.Fatalf("at one moment: %s", f)
		}
		return int(samples.Load())
	}
}

// Ten agents started at the same instant: at no moment are two of them RUNNING with overlapping
// ranges (the table is sampled throughout), and they converge to ten RUNNING agents with shards
// 0..9 of 10 within a few pulses.
func TestTenAgentsStartedAtOnceConvergeWithoutOverlap(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 24))
	stopSampling := sampler(t, store)
	start := make(chan struct{})
	var wg sync.WaitGroup
	started := make([]*agents.Agent, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			started[i], _ = startAgent(t, store, agents.Config{Member: memberConfig(fmt.Sprintf("agent-%d", i))}, nil)
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	require.Eventually(t, func() bool {
		as, err := store.Agents.Agents(context.Background())
		return err == nil && converged(as, 10)
	}, 30*time.Second, 10*time.Millisecond)
	took := time.Since(began)
	var pulses int64 // the most pulses one agent made until convergence
	for _, a := range started {
		pulses = max(pulses, a.Member.Stats.Pulses.Load())
	}
	samples := stopSampling()
	t.Logf("converged to 10 RUNNING agents in %s (%.1f pulse intervals), at most %d pulses each, %d samples of the table without overlap",
		took.Round(time.Millisecond), float64(took)/float64(testPulse), pulses, samples)
	// A few pulses: register, see everyone and take a shard, see everyone agree; with the pulse
	// every poll interval while WAITING (3 each, unloaded). Counted in pulses, not time: a database
	// stalled by a parallel suite makes each pulse slower, not more of them needed (the bound was
	// 25 pulse intervals of time).
	require.LessOrEqual(t, pulses, int64(25))
}

// Correctness never depends on the topology: agents with a stale view, several believing they own
// one range (here every agent is told the whole space, or half of it, at once), still settle every
// event exactly once, by the checker that counts the workers' own reports.
func TestStaleViewStillSettlesEveryEventExactlyOnce(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	ctx := context.Background()
	for range 10 {
		_, err := store.Events.CreatePendingBatch(ctx, 200)
		require.NoError(t, err)
	}
	ledger := verify.NewLedger()
	half, err := exactlyonce.ShardRange(0, 2)
	require.NoError(t, err)
	ranges := []*exactlyonce.HashRange{nil, nil, &half, &half, nil, &half}
	var wg sync.WaitGroup
	for i, r := range ranges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half the workers lease (claim, work, settle in three steps), half settle inline.
			e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Report: ledger,
				Works: exactlyonce.Works{exactlyonce.KindPlain: exactlyonce.ValueWork{New: func(int64) string { return exactlyonce.NewValue() }, Leased: i%2 == 0}}}
			for {
				b, err := e.ProcessDueIn(ctx, 0, 20, r)
				if err != nil {
					t.Error(err)
					return
				}
				if b.Claimed == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	// The two half-range workers leave nothing in the other half: one whole-space sweep.
	_, err = (&processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Report: ledger}).ProcessDue(ctx, 0, 5000)
	require.NoError(t, err)
	audit, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
	require.NoError(t, err)
	res := verify.Check(audit, ledger)
	require.True(t, res.OK(), "%s", res)
	require.Empty(t, res.Open)
	require.Equal(t, 2000, res.Reported)
}

// An agent that stops pulsing is ejected by another after its expiration, on the database's clock;
// meanwhile it stops claiming on its own (its lease is short on its clock), and its next pulse
// finds its row gone: it says so, registers again as a new agent, and runs again once every member
// agrees.
func TestEjectedAgentStopsClaimingAndRejoins(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ctx := context.Background()
	stale, err := agents.NewMember(store.Agents, memberConfig("stale"))
	require.NoError(t, err)
	// other lives a minute between pulses: only stale's expiration is under test, and a pulse of
	// other's that a loaded machine held up for seconds must not let stale eject it in return.
	otherConfig := memberConfig("other")
	otherConfig.Expiration = time.Minute
	other, err := agents.NewMember(store.Agents, otherConfig)
	require.NoError(t, err)
	pulseBoth := func() {
		require.NoError(t, stale.Pulse(ctx))
		require.NoError(t, other.Pulse(ctx))
	}
	for range 3 {
		pulseBoth()
	}
	r, ok := stale.Assignment()
	require.True(t, ok, "state %s", stale.State())
	want, _ := exactlyonce.ShardRange(0, 2)
	require.Equal(t, want, r)
	first := stale.ID()

	// stale stops pulsing; other keeps pulsing until it has ejected it.
	require.Eventually(t, func() bool {
		require.NoError(t, other.Pulse(ctx))
		as, err := store.Agents.Agents(ctx)
		require.NoError(t, err)
		return len(as) == 1
	}, 10*time.Second, testPulse/2)
	_, ok = stale.Assignment()
	require.False(t, ok, "an agent past its lease claims nothing, before it even pulses")
	require.Equal(t, int64(1), other.Stats.EjectedOthers.Load())

	require.NoError(t, stale.Pulse(ctx))
	require.Equal(t, int64(1), stale.Stats.Ejected.Load())
	require.Greater(t, stale.ID(), first, "it came back as a new agent")
	_, ok = stale.Assignment()
	require.False(t, ok, "a new agent waits before it runs")
	for range 3 {
		pulseBoth()
	}
	r, ok = stale.Assignment()
	require.True(t, ok)
	want, _ = exactlyonce.ShardRange(1, 2)
	require.Equal(t, want, r, "it rejoined behind the other, by id")
}

// Agents joining one by one while the others run, and leaving one by one: every join and every
// departure changes every member's shard, and at no moment are two RUNNING agents' ranges
// overlapping; after each change they converge again.
func TestAgentsJoiningAndLeavingNeverOverlap(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 24))
	stopSampling := sampler(t, store)
	var stops []func()
	for i := range 6 {
		_, stop := startAgent(t, store, agents.Config{Member: memberConfig(fmt.Sprintf("agent-%d", i))}, nil)
		stops = append(stops, stop)
		// The next joins while this one is being taken in, without waiting for convergence.
		time.Sleep(time.Duration(i) * testPulse / 3)
	}
	require.Eventually(t, func() bool {
		as, err := store.Agents.Agents(context.Background())
		return err == nil && converged(as, 6)
	}, 30*time.Second, 10*time.Millisecond)
	for i, stop := range stops[:4] {
		stop()
		require.Eventually(t, func() bool {
			as, err := store.Agents.Agents(context.Background())
			return err == nil && converged(as, 6-i-1)
		}, 30*time.Second, 10*time.Millisecond)
	}
	t.Logf("%d samples of the table without overlap", stopSampling())
}

// counting counts the events one agent settled.
type counting struct{ n atomic.Int64 }

func (c *counting) Claiming(string)               {}
func (c *counting) Settled(_ string, ids []int64) { c.n.Add(int64(len(ids))) }

// Shares: 100,000 pending events and 4 agents: each settles its quarter, 25% plus or minus 2%.
func TestFourAgentsShareTheEventsEvenly(t *testing.T) {
	t.Parallel()
	const events, n = 100_000, 4
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	counts := make([]*counting, n)
	for i := range counts {
		counts[i] = &counting{}
		// Ten seconds to expire, not one: an agent ejected mid-drain because a loaded machine delayed
		// its pulses hands its range to the others, and the shares measure that instead.
		cfg := memberConfig(fmt.Sprintf("agent-%d", i))
		cfg.Expiration = 10 * time.Second
		startAgent(t, store, agents.Config{Member: cfg, BatchSize: 500}, counts[i])
	}
	require.Eventually(t, func() bool {
		as, err := store.Agents.Agents(context.Background())
		return err == nil && converged(as, n)
	}, 30*time.Second, 10*time.Millisecond)
	_, err := mysqltest.LoadPending(context.Background(), store.DB.Pool(), events, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		open, err := mysqltest.CountOpen(context.Background(), store.DB.Pool())
		return err == nil && open == 0
	}, 5*time.Minute, 50*time.Millisecond)
	// An agent counts a batch after its settlement committed: the last counts may follow the table.
	counted := func() (n int64) {
		for _, c := range counts {
			n += c.n.Load()
		}
		return n
	}
	require.Eventually(t, func() bool { return counted() >= events }, time.Minute, 10*time.Millisecond,
		"every settled event counted by its agent")
	total := int64(0)
	for i, c := range counts {
		share := float64(c.n.Load()) / events
		t.Logf("agent %d settled %d events (%.2f%%)", i, c.n.Load(), 100*share)
		require.InDeltaf(t, 0.25, share, 0.02, "agent %d's share", i)
		total += c.n.Load()
	}
	require.EqualValues(t, events, total)
}
