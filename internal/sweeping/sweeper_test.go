package sweeping_test

import (
	"context"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func pending(t *testing.T, store *wire.Stores, n int) {
	t.Helper()
	for range n {
		_, err := store.Events.CreatePending(context.Background())
		require.NoError(t, err)
	}
}

func countPending(t *testing.T, store *wire.Stores) int {
	t.Helper()
	var n int
	require.NoError(t, store.DB.Pool().QueryRow("SELECT COUNT(*) FROM events WHERE state = 0").Scan(&n))
	return n
}

func TestSweepDrainsInBatchesAndStopsOnAShortBatch(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	pending(t, store, 25)
	s := sweeping.New(store.Sweeping(), sweeping.Config{BatchSize: 10, Grace: new(time.Duration(0))})
	res, err := s.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, sweeping.Result{Processed: 25, Batches: 3, Folded: 25}, res,
		"every event it settled was then folded into the count")
	require.Zero(t, countPending(t, store))
	n, err := store.Events.Count(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 25, n)

	var wrong int
	require.NoError(t, store.DB.Pool().QueryRow(
		"SELECT COUNT(*) FROM events WHERE processed_by <> ? OR process_count <> 1 OR value IS NULL", exactlyonce.BySweeper).Scan(&wrong))
	require.Zero(t, wrong)
}

func TestSweepRespectsTheGracePeriod(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	pending(t, store, 3)
	res, err := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Hour)}).Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, res.Processed)
	require.Equal(t, 3, countPending(t, store))
}

func TestSweepStopsBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	pending(t, store, 5)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// Less than StopBefore remains: the sweep must not start a batch.
	res, err := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), StopBefore: 5 * time.Second}).Sweep(ctx)
	require.NoError(t, err)
	require.True(t, res.Stopped)
	require.Zero(t, res.Batches)
	require.Zero(t, res.Folded, "nor a fold")
	require.Equal(t, 5, countPending(t, store))
}

// A long-running sweeper agent (the local runner's, the standalone agent's: Sweeper.Agent) keeps
// processing until it is cancelled, and then leaves.
func TestAnAgentKeepsSweepingUntilCancelled(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	a, err := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), Logger: quietLogger()}).
		Agent(fastAgent, exactlyonce.BySweeper)
	require.NoError(t, err)
	go func() { done <- a.Run(ctx) }()
	// Events that arrive while the loop idles are picked up on a later pass.
	for range 3 {
		pending(t, store, 4)
		testutil.Eventually(t, 10*time.Second, "the agent's loop processed the new events", func() bool {
			return countPending(t, store) == 0
		})
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	as, err := store.Agents.Agents(context.Background())
	require.NoError(t, err)
	require.Empty(t, as, "it left")
}
