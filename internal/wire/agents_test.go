package wire_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/exactlyonce/exactlyonce/internal/wire/delivery"
	"github.com/stretchr/testify/require"
)

// SHARDS_ASSIGNED may list several shards, as Hibernate Search's shards.assigned: the process runs
// one agent per shard, each its own member. Two processes' agents (shards 0 and 2, then 1, of 3)
// agree on the static total and each runs its own range; one shard alone gives one agent.
func TestSeveralAssignedShardsRunOneAgentEach(t *testing.T) {
	t.Parallel()
	two := wire.AgentConfigs(load(t, map[string]string{"AGENT_NAME": "p", "SHARDS_TOTAL": "3", "SHARDS_ASSIGNED": "0,2"}), "standalone", nil)
	require.Len(t, two, 2)
	one := wire.AgentConfigs(load(t, map[string]string{"AGENT_NAME": "q", "SHARDS_TOTAL": "3", "SHARDS_ASSIGNED": "1"}), "standalone", nil)
	require.Len(t, one, 1)
	require.Equal(t, "q", one[0].Member.Name, "one shard: the name as given")
	require.Len(t, wire.AgentConfigs(load(t, nil), "standalone", nil), 1, "dynamic sharding: one agent")

	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	var members []*agents.Member
	for _, ac := range append(two, one...) {
		m, err := agents.NewMember(store.Agents, ac.Member)
		require.NoError(t, err)
		members = append(members, m)
	}
	for range 3 {
		for _, m := range members {
			require.NoError(t, m.Pulse(context.Background()))
		}
	}
	for i, want := range []struct {
		name  string
		shard int
	}{{"p-shard0", 0}, {"p-shard2", 2}, {"q", 1}} {
		m := members[i]
		require.Equal(t, want.name, m.Config().Name)
		require.Equal(t, exactlyonce.AgentRunning, m.State(), "%s runs", want.name)
		r, ok := m.Assignment()
		require.True(t, ok)
		wantRange, _ := exactlyonce.ShardRange(want.shard, 3)
		require.Equal(t, wantRange, r, "%s holds shard %d of 3", want.name, want.shard)
	}
}

// The standalone agent (cmd/agent, built by StandaloneAgents) records the path that really
// processed its events: "agent", which the console's rates and verify count, never "sweeper".
func TestTheStandaloneAgentRecordsItsOwnPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ids, err := store.Events.CreatePendingBatch(ctx, 5)
	require.NoError(t, err)
	c := load(t, map[string]string{"SWEEP_GRACE": "0", "AGENT_PULSE_INTERVAL": "100ms", "AGENT_EXPIRATION": "1s",
		"AGENT_POLL_INTERVAL": "20ms"})
	as, err := delivery.StandaloneAgents(ctx, c, store, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Len(t, as, 1)
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = as[0].Run(actx) }()
	t.Cleanup(func() { stop(); <-done })
	testutil.Eventually(t, 30*time.Second, "the agent processed every event", func() bool {
		for _, id := range ids {
			e, err := store.Events.Get(ctx, id)
			require.NoError(t, err)
			if e.State != exactlyonce.Processed {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.ByAgent, e.ProcessedBy, "event %d", id)
	}
}

// A standalone agent whose WEBHOOK_TIMEOUT is close to its batches' bound (the agents' default
// BatchTimeout, 30 s) still delivers tasks: its batches are given the time a delivery needs
// (processing.Engine.TimeForTask), where a batch of 30 s, shorter than a delivery of 29 s and its
// margin, claimed the task and released it again, batch after batch, and never delivered it.
func TestAStandaloneAgentWithALongWebhookTimeoutDeliversItsTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	var mu sync.Mutex
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: srv.URL + "/hook", Payload: []byte(`{}`), ReferenceID: "r"}})
	require.NoError(t, err)
	c := load(t, map[string]string{"SWEEP_GRACE": "0", "AGENT_PULSE_INTERVAL": "100ms", "AGENT_EXPIRATION": "1s",
		"AGENT_POLL_INTERVAL": "100ms", "WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "WEBHOOK_TIMEOUT": "29s",
		"WEBHOOK_ALLOW_LOOPBACK": "true"})
	as, err := delivery.StandaloneAgents(ctx, c, store, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Len(t, as, 1)
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = as[0].Run(actx) }()
	t.Cleanup(func() { stop(); <-done })
	testutil.Eventually(t, 30*time.Second, "the agent delivered the task", func() bool {
		e, err := store.Events.Get(ctx, created[0].ID)
		require.NoError(t, err)
		return e.State == exactlyonce.Processed
	})
	mu.Lock()
	require.Equal(t, 1, requests, "delivered once")
	mu.Unlock()
	batches := as[0].Totals.Batches.Load()
	t.Logf("%d batches", batches)
	require.Less(t, batches, int64(300), "batches: the agent polls every 100 ms once nothing is due")
}
