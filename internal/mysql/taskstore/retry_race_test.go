package taskstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Bulk retries in parts racing each other and the reference's other writers, with real clients
// against the database: whatever the interleaving, every task once, one open task, the failed
// tasks in their order, and every caller's calls end (More false) without an error.

// retryUntilDone calls RetryReference(ref) until it answers More false and returns every id it
// answered, in order.
func retryUntilDone(ctx context.Context, store *wire.Stores, ref string) ([]int64, error) {
	var all []int64
	for {
		got, err := store.Tasks.RetryReference(ctx, ref)
		if err != nil {
			return all, err
		}
		all = append(all, got.IDs...)
		if !got.More {
			return all, nil
		}
	}
}

// Two callers retry one reference at once, both in parts (of 1, so that they race at every part):
// each part's tasks are retried by one of them, neither fails, and the tasks end in their places.
func TestTwoRetriesInPartsOfOneReferenceAtOnceBothFinish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ref = "parts-two"
	const n = 80
	db, store, ids := failedReference(ctx, t, ref, n)
	taskstore.RetryInParts(store.Tasks, 1, time.Minute, nil)
	var wg sync.WaitGroup
	got := make([][]int64, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = retryUntilDone(ctx, store, ref)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	seen := map[int64]int{}
	for _, g := range got {
		for _, id := range g {
			seen[id]++
		}
	}
	require.Len(t, seen, n, "every failed task retried")
	for id, c := range seen {
		require.Equal(t, 1, c, "task %d retried once", id)
	}
	want := [][2]int64{{ids[0], pending}}
	for _, id := range ids[1:] {
		want = append(want, [2]int64{id, queued})
	}
	require.Equal(t, want, statesOf(ctx, t, db, ref))
	require.Equal(t, truth(ctx, t, db, ref), listed(ctx, t, store, ref))
	require.True(t, claimable(ctx, t, store, ids[0]), "released")
}
