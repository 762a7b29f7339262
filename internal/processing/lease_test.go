package processing_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// No delivery runs under an expired lease. A claim leases all its tasks at once, and delivers them
// Concurrency at a time, so a task may wait for a slot; a delivery may take WEBHOOK_TIMEOUT. A task
// whose lease has expired is claimable by any other claim (the sweeper, a redelivered message),
// which delivers it too, at the same moment, and its settlement promotes the next task of the
// reference while the first claim still delivers the old one. Here the lease (3 s) is shorter than
// what a claim of 8 tasks takes one at a time with a receiver that answers in 700 ms: before, the
// claim started its last deliveries after their lease had expired (the receiver, which reads the
// task's row as each request arrives, saw it). Now a delivery ends by its lease: one whose lease
// has run out is released without starting, one that would outlive it is cut at the lease (a
// temporary failure), and every task is delivered, each request under a live lease.
func TestNoDeliveryRunsUnderAnExpiredLease(t *testing.T) {
	t.Parallel()
	core := testdb.Core(t, mysql.Config{}, 8)
	store := wire.NewStores(core)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var mu sync.Mutex
	var expired []string
	seen := map[int64]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(strings.TrimPrefix(r.Header.Get("webhook-id"), "task_"), 10, 64)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var held bool
		err = core.Pool().QueryRowContext(ctx,
			"SELECT state = 1 AND lease_expires_at > NOW(6) FROM events WHERE id = ?", id).Scan(&held)
		mu.Lock()
		seen[id]++
		if err != nil || !held {
			expired = append(expired, fmt.Sprintf("task %d delivered under an expired lease (err %v)", id, err))
		}
		mu.Unlock()
		select {
		case <-time.After(700 * time.Millisecond):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	const n = 8
	var ids []int64
	for i := 0; i < n; i++ {
		got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: srv.URL + "/hook",
			Payload: []byte(`{"n":` + strconv.Itoa(i) + `}`), MaxRetries: 5}})
		require.NoError(t, err)
		ids = append(ids, got[0].ID)
	}
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true,
		Timeout: 5 * time.Second})
	e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Lease: 3 * time.Second,
		Tasks: &processing.Tasks{Deliverer: client, Concurrency: 1, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}}

	require.Eventually(t, func() bool {
		if _, err := e.ProcessDue(ctx, 0, n); err != nil {
			t.Logf("claim: %v", err)
		}
		open, err := store.Events.Outcomes(ctx, ids)
		require.NoError(t, err)
		for _, o := range open {
			if o != exactlyonce.OutcomeAlreadySettled {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond, "every task settled")

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, expired)
	for _, id := range ids {
		require.NotZero(t, seen[id], "task %d delivered", id)
		item, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Processed, item.State, "task %d completed", id)
	}
}

// A batch whose messages name more tasks than one claim holds (eventstore.MaxClaimTasks) delivers
// them in successive claims of at most MaxClaimTasks each, one after the other: every task named is
// delivered by the batch, and no claim has more payloads in memory than its bound. Before the
// bound, the claim took every task named, its payloads whole in memory; with the bound alone, the
// tasks beyond it were deferred to a sweeper's claim of due events (the local processor's batches,
// whose messages name up to 100 events each, left most of their tasks waiting).
func TestProcessIDsDeliversTheTasksBeyondOneClaimInTheNext(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	const n = eventstore.MaxClaimTasks + 40
	var ids []int64
	for len(ids) < n {
		batch := make([]exactlyonce.NewTask, min(100, n-len(ids)))
		for i := range batch {
			batch[i] = exactlyonce.NewTask{URL: srv.URL + "/hook", Payload: []byte(`{"n":1}`), MaxRetries: 3}
		}
		created, err := store.Tasks.CreateTasks(ctx, batch)
		require.NoError(t, err)
		for _, c := range created {
			ids = append(ids, c.ID)
		}
	}
	e := taskEngine(store, exactlyonce.ByProcessor)
	claims := &settledByClaim{by: map[string]int{}}
	e.Report = claims
	out, err := e.ProcessIDs(ctx, ids)
	require.NoError(t, err)
	count := map[exactlyonce.Outcome]int{}
	for _, o := range out {
		count[o]++
	}
	require.Equal(t, map[exactlyonce.Outcome]int{exactlyonce.OutcomeSettled: n}, count, "every task named delivered by the batch")
	claims.mu.Lock()
	defer claims.mu.Unlock()
	require.Len(t, claims.by, 2, "two claims")
	for id, settled := range claims.by {
		require.LessOrEqual(t, settled, eventstore.MaxClaimTasks, "claim %s", id)
	}
}

// settledByClaim is a Reporter that counts the events each claim settled.
type settledByClaim struct {
	mu sync.Mutex
	by map[string]int
}

func (r *settledByClaim) Claiming(string) {}

func (r *settledByClaim) Settled(claimID string, ids []int64) {
	r.mu.Lock()
	r.by[claimID] += len(ids)
	r.mu.Unlock()
}
