package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The local runner's sweeper is an agent, and with MAPPING_CONCURRENCY=0 (a negative
// MappingConcurrency) nothing consumes the queue: every async event is processed by the agents,
// here the runner's and a standalone one sharing the hash space, each event exactly once. GET
// /agents lists both.
func TestLocalSweeperIsAnAgentAndSharesWithAStandaloneOne(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	ledger := verify.NewLedger()
	fast := agents.MemberConfig{PulseInterval: 200 * time.Millisecond, Expiration: 2 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := local.Start(ctx, store, client, local.Options{
		HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, Queues: q, MappingConcurrency: new(0), SweepInterval: 100 * time.Millisecond,
		Sweep: sweeping.Config{Grace: new(time.Duration(0)), Logger: testLogger()}, Engine: processing.Engine{Report: ledger}, Agent: agents.Config{Member: fast},
	}, testLogger())
	require.NoError(t, err)
	fast.Name, fast.Kind, fast.Logger = "standalone", "standalone", testLogger()
	standalone, err := agents.New(store.Agents, &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Report: ledger},
		agents.Config{Member: fast, PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = standalone.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
			require.NoError(t, sys.Wait())
		}
	}
	t.Cleanup(stop)

	testutil.Eventually(t, 30*time.Second, "the two agents run, each on half the hash space", func() bool {
		as, err := store.Agents.Agents(context.Background())
		require.NoError(t, err)
		return len(as) == 2 && as[0].State == exactlyonce.AgentRunning && as[1].State == exactlyonce.AgentRunning &&
			as[0].Assigned(2, 0) && as[1].Assigned(2, 1)
	})

	tg := Target{APIURL: sys.URL}
	var ids []int64
	for range 60 {
		status, id := tg.post(t, "/events/async")
		require.Equal(t, http.StatusAccepted, status)
		ids = append(ids, id)
	}
	testutil.Eventually(t, 30*time.Second, "the agents processed every async event", func() bool {
		for _, id := range ids {
			if tg.Get(t, id).ProcessedBy != exactlyonce.BySweeper {
				return false
			}
		}
		return true
	})

	res, err := openapitest.Client(t).Get(sys.URL + "/agents")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var body struct {
		Agents []struct {
			Name            string `json:"name"`
			State           string `json:"state"`
			TotalShardCount *int   `json:"totalShardCount"`
		} `json:"agents"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	require.Len(t, body.Agents, 2)
	names := []string{body.Agents[0].Name, body.Agents[1].Name}
	require.Contains(t, names, "standalone")
	for _, a := range body.Agents {
		require.Equal(t, "RUNNING", a.State)
		require.Equal(t, 2, *a.TotalShardCount)
	}

	stop()
	_, _, deleted, _, _ := sys.MappingStats()
	require.Zero(t, deleted, "no queue consumer ran")
	require.Equal(t, map[string]int{exactlyonce.BySweeper: 60}, requireSettledOnce(t, store, ledger, ids))
	as, err := store.Agents.Agents(context.Background())
	require.NoError(t, err)
	require.Empty(t, as, "both agents left when stopped")
}
