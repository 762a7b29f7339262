package processing_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// slowWork is work that calls out: it runs outside any transaction, and blocks until released.
type slowWork struct {
	started chan int64
	release chan struct{}
	fail    func(id int64) bool
}

func (w *slowWork) Inline() bool { return false }

func (w *slowWork) Do(ctx context.Context, e exactlyonce.Event) (exactlyonce.Result, error) {
	w.started <- e.ID
	select {
	case <-w.release:
	case <-ctx.Done():
		return exactlyonce.Result{}, ctx.Err()
	}
	if w.fail != nil && w.fail(e.ID) {
		return exactlyonce.Result{}, errors.New("the receiver said no")
	}
	return exactlyonce.Result{Value: "delivered"}, nil
}

// reports records what a worker reports of its settlements.
type reports struct {
	t        *testing.T
	mu       sync.Mutex
	claiming []string
	settled  map[string][]int64
}

func (r *reports) Claiming(id string) {
	r.mu.Lock()
	r.claiming = append(r.claiming, id)
	r.mu.Unlock()
}
func (r *reports) Settled(id string, ids []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Contains(r.t, r.claiming, id, "a claim reports settlements only after it said it was claiming")
	if r.settled == nil {
		r.settled = map[string][]int64{}
	}
	r.settled[id] = append(r.settled[id], ids...)
}

// The processor runs work that calls out on the lease path: while the work runs the event is
// `processing` and holds no row lock; then it is settled once, and reported once by the worker.
// Work that fails releases its event, and its message comes back.
func TestProcessorRunsSlowWorkOutsideAnyTransaction(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	ok, bad := mustPending(t, store), mustPending(t, store)
	work := &slowWork{started: make(chan int64, 2), release: make(chan struct{}), fail: func(id int64) bool { return id == bad }}
	rep := &reports{t: t}
	p := &processing.Processor{Engine: processing.Engine{Store: store.Events, TaskStore: store.Tasks, Works: exactlyonce.Works{exactlyonce.KindPlain: work}, Report: rep}}

	done := make(chan events.SQSEventResponse, 1)
	go func() {
		resp, err := p.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
			record("m-ok", queue.Encode(ok)), record("m-bad", queue.Encode(bad))}})
		require.NoError(t, err)
		done <- resp
	}()
	<-work.started
	for _, id := range []int64{ok, bad} {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Processing, e.State, "event %d is leased while the work runs", id)
	}
	// No row lock is held across the work: another transaction locks the row without waiting.
	tx := holdRow(t, store, ok)
	require.NoError(t, tx.Rollback())
	close(work.release)
	resp := <-done
	require.Equal(t, []string{"m-bad"}, failedIDs(resp))

	e, err := store.Events.Get(ctx, ok)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, e.State)
	require.Equal(t, "delivered", *e.Value)
	require.Equal(t, 1, e.ProcessCount)
	e, err = store.Events.Get(ctx, bad)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, e.State, "failed work releases its event")

	require.Len(t, rep.claiming, 1)
	require.Equal(t, map[string][]int64{rep.claiming[0]: {ok}}, rep.settled)
}

// A worker whose deadline arrives before it could do all its leased work releases what it did not
// start: nothing is lost, and the released events are claimable at once.
func TestLeasedWorkNotStartedBeforeTheDeadlineIsReleased(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	a, b := mustPending(t, store), mustPending(t, store)
	work := &slowWork{started: make(chan int64, 2), release: make(chan struct{})}
	e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Works: exactlyonce.Works{exactlyonce.KindPlain: work}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-work.started; cancel() }() // the deadline arrives during the first delivery
	b1, err := e.ProcessDue(ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, processing.Batch{Claimed: 2, Settled: 0}, b1)
	for _, id := range []int64{a, b} {
		ev, err := store.Events.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Pending, ev.State, "event %d released, not left leased", id)
	}
	close(work.release)
	b2, err := e.ProcessDue(context.Background(), 0, 10)
	require.NoError(t, err)
	require.Equal(t, processing.Batch{Claimed: 2, Settled: 2}, b2)
}

func mustPending(t *testing.T, store *wire.Stores) int64 {
	t.Helper()
	id, err := store.Events.CreatePending(context.Background())
	require.NoError(t, err)
	return id
}

// An event whose kind has no work is left open, and said so (its failure recorded, it waits its
// backoff): the engine decides it, in the claim's transaction.
func TestEventWithoutWorkIsLeftOpen(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	id, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	e := &processing.Engine{Store: store.Events, TaskStore: store.Tasks, By: exactlyonce.BySweeper, Works: exactlyonce.Works{}}
	out, err := e.ProcessIDs(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.OutcomeBusy, out[id], "its work failed: it waits its backoff")
	ev, err := store.Events.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, ev.State)
	require.Equal(t, 1, ev.Attempts)
	require.Contains(t, ev.LastError, `no work for events of kind "plain"`)
}
