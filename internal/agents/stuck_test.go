package agents_test

import (
	"context"
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

// blockingWork is leased work that blocks until released: a batch stuck behind something (a lock
// wait on a row a stalled process holds, a slow webhook).
type blockingWork struct{ release chan struct{} }

func (w blockingWork) Do(ctx context.Context, _ exactlyonce.Event) (exactlyonce.Result, error) {
	select {
	case <-w.release:
	case <-ctx.Done():
		return exactlyonce.Result{}, ctx.Err()
	}
	return exactlyonce.Result{Value: "v"}, nil
}

func (blockingWork) Inline() bool { return false }

// A batch that takes longer than the expiration does not get its agent ejected: the agent keeps
// pulsing while its batch waits (seen first when a survivor's settlement waited for the row locks of
// an agent stopped with SIGSTOP mid-claim, and the survivor was ejected in turn).
func TestAStuckBatchDoesNotGetItsAgentEjected(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	_, err := store.Events.CreatePendingBatch(context.Background(), 5)
	require.NoError(t, err)
	work := blockingWork{release: make(chan struct{})}
	stuck, err := agents.New(store.Agents, &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper,
		Works: exactlyonce.Works{exactlyonce.KindPlain: work}}, agents.Config{Member: memberConfig("stuck"),
		PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = stuck.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	startAgent(t, store, agents.Config{Member: memberConfig("other")}, nil)

	// The stuck agent's batch is under way (some events leased to it), for three expirations.
	require.Eventually(t, func() bool {
		var leased int
		require.NoError(t, store.DB.Pool().QueryRow("SELECT COUNT(*) FROM events WHERE state = 1").Scan(&leased))
		return leased > 0
	}, 10*time.Second, 5*time.Millisecond)
	id := stuck.Member.ID()
	time.Sleep(3 * testExpiration) // the condition is the passing of time: three expirations
	as, err := store.Agents.Agents(context.Background())
	require.NoError(t, err)
	var ids []int64
	for _, a := range as {
		ids = append(ids, a.ID)
	}
	close(work.release)
	require.Contains(t, ids, id, "the agent was ejected while its batch waited")
	require.Zero(t, stuck.Member.Stats.Ejected.Load())
}
