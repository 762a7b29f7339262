package sweeping_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The scheduled sweepers as agents: SWEEPER_SHARDS=2 shards, each tick's invocation an agent for
// its whole duration, overlapping the previous tick's. The next invocation of a shard waits for the
// previous one to hand the shard over (it never runs beside it), takes it within a pulse or two of
// the leaving (far less than an expiration), and every event is settled exactly once.
func TestScheduledSweepersHandTheirShardsOver(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	ctx := context.Background()
	for range 10 {
		_, err := store.Events.CreatePendingBatch(ctx, 200)
		require.NoError(t, err)
	}
	ledger := verify.NewLedger()
	const expiration = 4 * time.Second
	// What an invocation keeps for its last batch and its leaving: with 300 ms, a database stalled
	// by a parallel suite left an invocation's row behind ("could not leave").
	const stopBefore = time.Second
	s := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), BatchSize: 20, Engine: processing.Engine{Report: ledger}, Shards: 2,
		AgentStopBefore: stopBefore, Logger: quietLogger(),
		Agent: agents.Config{Member: agents.MemberConfig{PulseInterval: 100 * time.Millisecond, Expiration: expiration},
			PollInterval: 50 * time.Millisecond}})

	// Sample the table throughout: never two RUNNING agents on one shard; how long shard 0 goes
	// without a RUNNING agent once it had one.
	sctx, stopSampling := context.WithCancel(ctx)
	var (
		overlap  string
		longest  time.Duration
		sampling sync.WaitGroup
	)
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		var since time.Time // when shard 0 lost its RUNNING agent
		seen := false
		for sctx.Err() == nil {
			as, err := store.Agents.Agents(sctx)
			if err != nil {
				continue
			}
			running := map[int]int{}
			for _, a := range as {
				if a.State == exactlyonce.AgentRunning {
					running[*a.AssignedShardIndex]++
					if running[*a.AssignedShardIndex] > 1 && overlap == "" {
						overlap = "two RUNNING agents on one shard"
					}
				}
			}
			switch {
			case running[0] > 0 && !since.IsZero():
				longest = max(longest, time.Since(since))
				since = time.Time{}
			case running[0] > 0:
				seen = true
			case seen && since.IsZero():
				since = time.Now()
			}
		}
	}()

	// Three ticks of shard 0, each 6 s long (5 s of claiming), starting every 3.5 s (the overlap of
	// timeout and rate), and one long invocation of shard 1. (With half these lengths, a loaded
	// machine's invocation ended before any of its pulses did, "no pulse succeeded in the whole
	// invocation": in `make test`, 3.5 s ticks failed so while the tests' server took 20 s to make
	// a database.)
	var wg sync.WaitGroup
	invoke := func(shard int, after, length time.Duration) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(after)
			ictx, cancel := context.WithTimeout(ctx, length)
			defer cancel()
			_, err := s.HandleAgent(ictx, sweeping.ShardInput{Shard: &shard})
			require.NoError(t, err)
		}()
	}
	invoke(1, 0, 13*time.Second)
	for tick := range 3 {
		invoke(0, time.Duration(tick)*3500*time.Millisecond, 6*time.Second)
	}
	wg.Wait()
	stopSampling()
	sampling.Wait()
	require.Empty(t, overlap)
	t.Logf("shard 0 went at most %s without a RUNNING agent between ticks (expiration %s)", longest, expiration)
	require.Less(t, longest, expiration)

	// The ticks above prove the handover, not a throughput: on a loaded machine they may end with
	// events still waiting, or an invocation whose leaving outlasted its deadline may leave its row
	// (it says so, and a later invocation ejects it once expired: a tick below lasts longer than an
	// expiration). Later ticks, one per shard at a time as the schedule runs them, settle the rest
	// and eject such rows; every event must then be settled exactly once, and no agent be left. (An
	// invocation that never left would leave a row after every tick.)
	var res verify.Result
	for round := 0; ; round++ {
		audit, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
		require.NoError(t, err)
		res = verify.Check(audit, ledger)
		require.True(t, res.OK(), "%s", res)
		as, err := store.Agents.Agents(ctx)
		require.NoError(t, err)
		if len(res.Open) == 0 && len(as) == 0 {
			break
		}
		require.Less(t, round, 30, "%d events still open and %d agents left after %d more ticks per shard", len(res.Open), len(as), round)
		t.Logf("round %d: %d events still open, %d agents left; one more tick per shard", round, len(res.Open), len(as))
		for shard := range 2 {
			invoke(shard, 0, workWindow+stopBefore)
		}
		wg.Wait()
	}

	var bad int = 2
	_, err := s.HandleAgent(ctx, sweeping.ShardInput{Shard: &bad})
	require.ErrorContains(t, err, "shard 2 of 2")
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
