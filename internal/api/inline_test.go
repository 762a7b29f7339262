package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/stretchr/testify/require"
)

// requestMark marks a request's context, so that the store and the queue can tell whether they
// run under it.
type requestMark struct{}

// blocking is a store and a queue whose calls can be made to block until their context ends. They
// count the calls running, and record whether each ran under the request's context.
type blocking struct {
	api.EventStore // only CreatePendingBatch is used
	blockInsert    bool
	blockSend      bool
	entered        chan struct{} // closed when the call that blocks has started
	running        atomic.Int32  // store and queue calls not yet returned
	detached       atomic.Int32  // calls that ran on a context other than the request's
}

func (b *blocking) call(ctx context.Context, block bool) error {
	b.running.Add(1)
	defer b.running.Add(-1)
	if ctx.Value(requestMark{}) == nil {
		b.detached.Add(1)
	}
	if !block {
		return nil
	}
	close(b.entered)
	<-ctx.Done()
	return ctx.Err()
}

func (b *blocking) CreatePendingBatch(ctx context.Context, n int) ([]int64, error) {
	if err := b.call(ctx, b.blockInsert); err != nil {
		return nil, err
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	return ids, nil
}

func (b *blocking) Send(ctx context.Context, _ []int64) error { return b.call(ctx, b.blockSend) }

// On Lambda nothing of a request may run after its answer: the execution environment is frozen
// once the handler returns, and a goroutine frozen inside the allocator's transaction would hold
// the counter's row lock, or a block of ids, until the environment is thawed or discarded. With
// AsyncGroup.Inline an async create runs in the request's goroutine under the request's context:
// when the request's context ends (Lambda's deadline) while the insert or the send is blocked, the
// handler returns only after that call has, and nothing of it runs afterwards.
func TestInlineAsyncCreateRunsNothingAfterTheAnswer(t *testing.T) {
	t.Parallel()
	for name, b := range map[string]*blocking{
		"insert blocks": {blockInsert: true},
		"send blocks":   {blockSend: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b.entered = make(chan struct{})
			s := &api.Server{Stores: api.Stores{Events: b}, Queue: b, AsyncGroup: api.AsyncGroup{Inline: true}}
			ctx, cancel := context.WithCancel(context.WithValue(context.Background(), requestMark{}, true))
			defer cancel()
			req := httptest.NewRequest("POST", "/events/async", nil).WithContext(ctx)
			answered := make(chan int)
			go func() {
				rec := httptest.NewRecorder()
				openapitest.Handler(t, s).ServeHTTP(rec, req)
				answered <- rec.Code
			}()
			select {
			case <-b.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the blocking call never started")
			}
			cancel() // the invocation's deadline
			status := <-answered
			require.Zero(t, b.running.Load(), "a store or queue call still runs after the answer (%d)", status)
			require.Zero(t, b.detached.Load(), "every call ran under the request's context")
			if name == "send blocks" {
				require.Equal(t, http.StatusAccepted, status, "the event is committed; the sweeper sends it")
			}
		})
	}
}

// Without blocking, an inline create is one insert and one message, under the request's context,
// both returned before the answer.
func TestInlineAsyncCreateStoresAndSendsBeforeAnswering(t *testing.T) {
	t.Parallel()
	b := &blocking{}
	s := &api.Server{Stores: api.Stores{Events: b}, Queue: b, AsyncGroup: api.AsyncGroup{Inline: true, Linger: time.Hour}}
	ctx := context.WithValue(context.Background(), requestMark{}, true)
	for range 3 {
		rec := httptest.NewRecorder()
		openapitest.Handler(t, s).ServeHTTP(rec, httptest.NewRequest("POST", "/events/async", nil).WithContext(ctx))
		require.Equal(t, http.StatusAccepted, rec.Code)
		require.Zero(t, b.running.Load())
	}
	require.Zero(t, b.detached.Load(), "Linger is ignored: nothing is left to an outbox")
	require.NoError(t, s.Drain(context.Background()), "and there is nothing to drain")
}
