package sweeping_test

import (
	"bytes"
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
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// hookCounter is a webhook receiver on loopback that answers 200 and counts the requests of each
// webhook-id.
type hookCounter struct {
	mu   sync.Mutex
	byID map[string]int
}

func newHookCounter(t *testing.T) (*hookCounter, string) {
	h := &hookCounter{byID: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.byID[r.Header.Get("webhook-id")]++
		h.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (h *hookCounter) requests(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byID[id]
}

// A sweeper invocation whose deadline leaves less than a delivery's timeout and margin claims no
// task: it cannot finish one. It processes the other due events, then polls at its poll interval
// (a handful of claims, where claiming the task and releasing it again, batch after batch, made
// thousands: 3,609 in 4 s, seen with the sweeper's bootstrap and its default WEBHOOK_TIMEOUT). The
// task is not attempted, keeps its attempts, and the next invocation, with the time, delivers it
// once.
func TestASweeperNearItsDeadlineClaimsNoTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := testdb.DB(t, 8)
	db, tally := mysqltest.TalliedDB(t, dsn, 8, "")
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)

	hooks, url := newHookCounter(t)
	created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: url + "/hook", Payload: []byte(`{"n":1}`),
		ReferenceID: "r", MaxRetries: 3}})
	require.NoError(t, err)
	task := created[0].ID
	plain, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)

	// A delivery needs its timeout, 3 s, and the settlement's margin, 2 s: 5 s.
	const webhookTimeout = 3 * time.Second
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true, Timeout: webhookTimeout})
	const poll = 200 * time.Millisecond
	var logs bytes.Buffer // written under the handler's lock
	s := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		AgentStopBefore: 2300 * time.Millisecond,
		Engine:          processing.Engine{Tasks: &processing.Tasks{Deliverer: client, Timeout: webhookTimeout}},
		Agent: agents.Config{Member: agents.MemberConfig{PulseInterval: 100 * time.Millisecond, Expiration: 2 * time.Second},
			PollInterval: poll, PollJitter: poll / 2}})

	// An invocation of 4.8 s: it runs for 2.5 s, with less than 5 s left throughout, and keeps 2.3 s
	// to leave (with 500 ms, a database stalled by a parallel suite cut the leaving off: "could not
	// leave", a WARN in a normal end).
	before := tally.Statements()
	start := time.Now()
	ictx, cancel := context.WithTimeout(ctx, 4800*time.Millisecond)
	res, err := s.HandleAgent(ictx, sweeping.ShardInput{})
	cancel()
	require.NoError(t, err)
	ran := time.Since(start)
	statements := tally.Statements() - before
	t.Logf("short invocation: %d batches, %d statements in %s", res.Batches, statements, ran.Round(time.Millisecond))
	require.Equal(t, 1, res.Processed, "the plain event is processed")
	e, err := store.Events.Get(ctx, plain)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, e.State)
	// One batch per poll interval at most once nothing it can take is due (and one for the plain
	// event); the loop made thousands.
	require.LessOrEqual(t, res.Batches, int(ran/poll)+3, "batches in %s", ran)
	require.Less(t, statements, int64(400), "statements in %s", ran)
	require.NotContains(t, logs.String(), `"level":"WARN"`, "a normal end is quiet")
	require.NotContains(t, logs.String(), `"level":"ERROR"`)

	require.Zero(t, hooks.requests(processing.WebhookID(task)), "the task was not attempted")
	e, err = store.Events.Get(ctx, task)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, e.State)
	require.Zero(t, e.Attempts)
	attempts, err := store.Tasks.Attempts(ctx, task)
	require.NoError(t, err)
	require.Empty(t, attempts)

	// The next invocation has the time: it delivers the task, once.
	ictx, cancel = context.WithTimeout(ctx, 8*time.Second)
	res, err = s.HandleAgent(ictx, sweeping.ShardInput{})
	cancel()
	require.NoError(t, err)
	require.Equal(t, 1, res.Processed)
	e, err = store.Events.Get(ctx, task)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, e.State)
	require.Equal(t, 1, hooks.requests(processing.WebhookID(task)), "delivered once")
	attempts, err = store.Tasks.Attempts(ctx, task)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, 1, attempts[0].Number)
}
