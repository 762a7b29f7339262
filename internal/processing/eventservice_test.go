package processing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/stretchr/testify/require"
)

// allWorkers lists the registry, active and done.
func allWorkers(t *testing.T, ctx context.Context, store *mysql.Store) []exactlyonce.EventWorker {
	t.Helper()
	active, err := store.ActiveWorkers(ctx)
	require.NoError(t, err)
	done, err := store.DoneWorkers(ctx, 1000)
	require.NoError(t, err)
	return append(active, done...)
}

// WORKER_MAX_REFERENCES=3 and the tasks of 10 references: the EventService packs them into 4 event
// workers; the three full ones are willTerminate, drain and are done; the fourth holds the tenth
// reference and lives on. The books match the task rows exactly, a failed task counted as failed.
func TestEventServicePacksReferencesIntoWorkers(t *testing.T) {
	t.Parallel()
	const refs, perRef = 10, 5
	store := testdb.Store(t, mysql.StoreConfig{}, 8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, srv := newOrderReceiver(t, func(ref string, seq, n int) int {
		if ref == "ref-4" && seq == 1 {
			return http.StatusBadRequest // fails for good: counted in tasksFailed
		}
		return http.StatusOK
	})
	for k := 0; k < perRef; k++ {
		var batch []exactlyonce.NewTask
		for r := 0; r < refs; r++ {
			payload, _ := json.Marshal(orderPayload{Ref: fmt.Sprintf("ref-%d", r), Seq: k})
			batch = append(batch, exactlyonce.NewTask{URL: srv.URL + "/hook", Payload: payload, ReferenceID: fmt.Sprintf("ref-%d", r)})
		}
		_, err := store.CreateTasks(ctx, batch)
		require.NoError(t, err)
	}
	e := taskEngine(store, exactlyonce.BySweeper)
	e.Workers = &processing.EventService{Store: store, AgentID: func() int64 { return 1 }, MaxReferences: 3}
	for settled := 0; settled < refs*perRef; {
		b, err := e.ProcessDue(ctx, 0, 50)
		require.NoError(t, err)
		settled += b.Settled + b.GaveUp
		require.NoError(t, ctx.Err())
	}
	rec.mu.Lock()
	require.Empty(t, rec.early)
	for r := 0; r < refs; r++ {
		want := []int{0, 1, 2, 3, 4}
		if r == 4 {
			want = []int{0, 2, 3, 4}
		}
		require.Equal(t, want, rec.delivered[fmt.Sprintf("ref-%d", r)])
	}
	rec.mu.Unlock()

	ws := allWorkers(t, ctx, store)
	require.Len(t, ws, 4)
	full := 0
	for _, w := range ws {
		require.Equal(t, 3, w.MaxReferenceCount)
		require.Equal(t, int64(1), w.AgentID)
		if len(w.References) == 3 {
			full++
			require.True(t, w.WillTerminate, "full worker %s", w.ID)
			require.True(t, w.IsDone, "full worker %s drained", w.ID)
			require.Zero(t, w.TasksRemaining)
		} else {
			require.Len(t, w.References, 1)
			require.False(t, w.WillTerminate)
			require.False(t, w.IsDone, "the worker with room lives on")
		}
		require.Equal(t, int64(len(w.References)*perRef), w.TasksCompleted+w.TasksFailed, "worker %s", w.ID)
	}
	require.Equal(t, 3, full)
	require.NoError(t, verify.WorkerBooks(ctx, store.DB()))
	holder := map[string]string{}
	for _, w := range ws {
		for _, ref := range w.References {
			require.Empty(t, holder[ref], "reference %s held by %s and %s", ref, holder[ref], w.ID)
			holder[ref] = w.ID
		}
	}
	require.NoError(t, e.Workers.ForgetDone(ctx))
	require.Len(t, e.Workers.Workers(), 1, "the service forgets the done workers")

	// Stopping the service (its agent leaving) makes the last worker willTerminate, and done: it has
	// nothing left.
	require.NoError(t, e.Workers.Stop(ctx))
	active, err := store.ActiveWorkers(ctx)
	require.NoError(t, err)
	require.Empty(t, active)
}
