package processing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// A task's failures are kept in the database, not in the queue (docs/departures.md): the processor
// acknowledges the message of a task whose delivery failed, temporarily or for good, so the queue
// neither redelivers it nor moves it to the dead-letter queue. A temporary failure waits its backoff
// in the task's row and a sweeper delivers it again with no message at all; a permanent one is
// `failed`, with its error, until someone retries it (POST /events/{id}/retry: Store.RetryTask).
func TestTaskFailuresStayInTheDatabaseNotInTheQueue(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	p := &processing.Processor{Engine: processing.Engine{Store: store.Events, TaskStore: store.Tasks, Tasks: taskEngine(store, exactlyonce.ByProcessor).Tasks}}
	sweeper := taskEngine(store, exactlyonce.BySweeper)
	get := func(id int64) exactlyonce.Event {
		t.Helper()
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		return e
	}
	deliverViaTheQueue := func(id int64) {
		t.Helper()
		resp, err := p.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{record("m-task", queue.Encode(id))}})
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures, "the message is acknowledged: the queue neither redelivers it nor dead-letters it")
	}

	// Temporary: a 503, then a 204.
	flaky := &scriptedReceiver{handle: func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}}
	srvFlaky := httptest.NewServer(flaky)
	t.Cleanup(srvFlaky.Close)
	id := oneTask(t, store, srvFlaky.URL, 3)
	deliverViaTheQueue(id)
	got := get(id)
	require.Equal(t, exactlyonce.Pending, got.State, "it waits its backoff in its row")
	require.NotNil(t, got.NextAttemptAt)
	require.Equal(t, 1, flaky.count())
	// No message names it any more: a sweeper finds it once its backoff is over.
	testutil.Eventually(t, 10*time.Second, "a sweeper delivered the task again", func() bool {
		_, err := sweeper.ProcessDue(ctx, 0, 10)
		require.NoError(t, err)
		return get(id).State == exactlyonce.Processed
	})
	require.Equal(t, 2, flaky.count())

	// Permanent: a 400, then (after the manual retry) a 204.
	refusing := &scriptedReceiver{handle: func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}}
	srvRefusing := httptest.NewServer(refusing)
	t.Cleanup(srvRefusing.Close)
	id = oneTask(t, store, srvRefusing.URL, 3)
	deliverViaTheQueue(id)
	got = get(id)
	require.Equal(t, exactlyonce.Failed, got.State, "kept as failed, in the database")
	require.Contains(t, got.LastError, "HTTP 400")
	b, err := sweeper.ProcessDue(ctx, 0, 10)
	require.NoError(t, err)
	require.Zero(t, b.Settled, "a failed task stays failed until someone retries it")
	_, pending, err := store.Tasks.RetryTask(ctx, id)
	require.NoError(t, err)
	require.True(t, pending)
	_, err = sweeper.ProcessDue(ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, get(id).State)
	require.Equal(t, 2, refusing.count())
}
