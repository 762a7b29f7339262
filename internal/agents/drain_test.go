package agents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// An agent told to stop (SIGTERM) finishes the deliveries under way and starts no new one: the
// tasks its settlements would hand on to it are left pending, for the agents that stay, which
// deliver them in order, each once. Before, the chain went on delivering a busy reference's tasks
// for as long as the batch's deadline allowed (30 s less a delivery's timeout and margin): found
// against `make run`, where a `make agent` behind a reference of 300 ms deliveries took 15.3 s to
// exit after SIGTERM, holding its range all that while.
func TestAStoppedAgentStartsNoNewDeliveryOfItsChain(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	var mu sync.Mutex
	var seqs []int
	started := make(chan struct{}, 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct{ Seq int }
		_ = json.NewDecoder(r.Body).Decode(&p)
		started <- struct{}{}
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		seqs = append(seqs, p.Seq)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	const n = 60
	var batch []exactlyonce.NewTask
	for i := 0; i < n; i++ {
		batch = append(batch, exactlyonce.NewTask{URL: srv.URL, Payload: []byte(fmt.Sprintf(`{"seq":%d}`, i)), ReferenceID: "drain", MaxRetries: 3})
	}
	_, err := store.Tasks.CreateTasks(context.Background(), batch)
	require.NoError(t, err)
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seqs)
	}

	log := slog.New(slog.NewJSONHandler(&testutil.Buffer{}, nil))
	stop, done := startTaskAgent(t, store, "stopping", log)
	for i := 0; i < 3; i++ {
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the agent did not start delivering")
		}
	}
	stopped := time.Now()
	stop() // SIGTERM, during the third delivery
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the agent did not stop")
	}
	took := time.Since(stopped)
	at := delivered()
	require.LessOrEqual(t, at, 4, "deliveries started after the stop (took %s)", took)
	require.Less(t, took, 5*time.Second, "the stop waited for the chain")

	// What it left is pending for whoever stays: delivered in order, each once.
	startTaskAgent(t, store, "staying", log)
	testutil.Eventually(t, time.Minute, "the agent that stays delivered the rest", func() bool { return delivered() >= n })
	mu.Lock()
	defer mu.Unlock()
	for i, s := range seqs {
		require.Equal(t, i, s, "in order, each once: %v", seqs)
	}
}

// startTaskAgent runs an agent named name that delivers tasks until stop is called (as SIGTERM
// would tell it) or the test ends; done is closed once it has returned.
func startTaskAgent(t *testing.T, store *wire.Stores, name string, log *slog.Logger) (stop func(), done <-chan struct{}) {
	t.Helper()
	a, err := agents.New(store.Agents, taskEngine(store, config.Config{}, time.Minute, log),
		agents.Config{Member: memberConfig(name), PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	return cancel, ran
}
