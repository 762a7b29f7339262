package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/stretchr/testify/require"
)

// slowQueue records messages and when they were sent; with hold set, its first Send waits until
// hold is closed, after closing entered.
type slowQueue struct {
	mu      sync.Mutex
	sent    [][]int64
	at      []time.Time
	entered chan struct{}
	hold    chan struct{}
}

func (q *slowQueue) Send(_ context.Context, ids []int64) error {
	q.mu.Lock()
	first := len(q.sent) == 0
	q.sent = append(q.sent, append([]int64(nil), ids...))
	q.at = append(q.at, time.Now())
	q.mu.Unlock()
	if first && q.hold != nil {
		close(q.entered)
		<-q.hold
	}
	return nil
}

func (q *slowQueue) messages() [][]int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([][]int64(nil), q.sent...)
}

func freeStore() *gateStore {
	s := &gateStore{entered: make(chan struct{}), release: make(chan struct{})}
	close(s.release)
	return s
}

// With Linger, a request is answered once its event is committed, before any message names it;
// the events of several groups share a message; Drain sends what is held without lingering.
func TestLingerAnswersOnCommitAndDrainSendsWhatIsHeld(t *testing.T) {
	t.Parallel()
	store := freeStore()
	q := &slowQueue{}
	s := &Server{Stores: Stores{Events: store}, Queue: q, AsyncGroup: AsyncGroup{Linger: time.Hour}}
	srv := openapitest.NewServer(t, s)
	t.Cleanup(srv.Close)

	for want := int64(1); want <= 3; want++ {
		resp, err := http.Post(srv.URL+"/events/async", "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
	}
	require.Equal(t, [][]int64{{1}, {2}, {3}}, store.batches, "three requests one after the other: three groups")
	require.Empty(t, q.messages(), "answered before any message was sent")

	require.NoError(t, s.Drain(context.Background()))
	require.Equal(t, [][]int64{{1, 2, 3}}, q.messages(), "one message for the three groups")
	require.NoError(t, s.Drain(context.Background()), "nothing left to drain")
	require.Len(t, q.messages(), 1)
}

// The outbox does not linger once a message is full: Max ids go at once.
func TestOutboxSendsAFullMessageAtOnce(t *testing.T) {
	t.Parallel()
	q := &slowQueue{}
	g := newAsyncGroups(&Server{Stores: Stores{Events: freeStore()}, Queue: q, AsyncGroup: AsyncGroup{Max: 3, Linger: time.Hour}})
	create := func(n int) {
		for range n {
			_, err := g.create(context.Background())
			require.NoError(t, err)
		}
	}
	create(3)
	testutil.Eventually(t, 10*time.Second, "a full message is sent", func() bool { return len(q.messages()) == 1 })
	create(3)
	testutil.Eventually(t, 10*time.Second, "the next full message is sent", func() bool { return len(q.messages()) == 2 })
	create(1)
	require.Len(t, q.messages(), 2, "a message of one id lingers")
	require.NoError(t, g.drain(context.Background()))
	require.Equal(t, [][]int64{{1, 2, 3}, {4, 5, 6}, {7}}, q.messages())
}

// An id that has no company is sent once Linger has passed, and not before.
func TestOutboxSendsALoneIDAfterLinger(t *testing.T) {
	t.Parallel()
	const linger = 50 * time.Millisecond
	q := &slowQueue{}
	g := newAsyncGroups(&Server{Stores: Stores{Events: freeStore()}, Queue: q, AsyncGroup: AsyncGroup{Linger: linger}})
	start := time.Now()
	id, err := g.create(context.Background())
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, "the lone id is sent", func() bool { return len(q.messages()) == 1 })
	require.Equal(t, [][]int64{{id}}, q.messages())
	require.GreaterOrEqual(t, q.at[0].Sub(start), linger, "sent before Linger had passed")
}

// While the queue is stuck, the outbox holds at most outboxLimit messages' worth of ids; the others
// are committed and left to the sweeper, with a warning that says how many.
func TestOutboxLeavesWhatItCannotHoldToTheSweeper(t *testing.T) {
	t.Parallel()
	q := &slowQueue{entered: make(chan struct{}), hold: make(chan struct{})}
	var logs testutil.Buffer
	s := &Server{Stores: Stores{Events: freeStore()}, Queue: q, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		AsyncGroup: AsyncGroup{Max: 1, Linger: time.Hour}}
	g := newAsyncGroups(s)
	_, err := g.create(context.Background())
	require.NoError(t, err)
	<-q.entered // the sender is stuck sending id 1
	const more = outboxLimit + 50
	for range more {
		_, err := g.create(context.Background())
		require.NoError(t, err, "a request is answered even when its id cannot be held")
	}
	close(q.hold)
	require.NoError(t, g.drain(context.Background()))

	var want [][]int64
	for id := int64(1); id <= 1+outboxLimit; id++ {
		want = append(want, []int64{id})
	}
	require.Equal(t, want, q.messages(), "the first outboxLimit ids held are sent, in order")
	require.Contains(t, logs.String(), "events left to the sweeper")
	require.Contains(t, logs.String(), "events=50")
}
