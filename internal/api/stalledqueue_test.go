package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// With the SQS endpoint stalled (its process stopped with SIGSTOP: connections accepted, nothing
// answered), an async create that sends its message before it answers, as on Lambda, answers 202
// within the send's bound, its event committed and left pending for the sweeper: it waited 10 s
// (20 s with an Idempotency-Key), as long as the API function's whole timeout on AWS, which would
// have killed it before it answered.
func TestAStalledQueueDoesNotHoldTheAnswer(t *testing.T) {
	t.Parallel()
	sqsSrv, err := localsqs.Start("")
	require.NoError(t, err)
	t.Cleanup(sqsSrv.Stop)
	client := localsqs.NewClient(sqsSrv.URL)
	qs := localsqs.Queues(t, client, 30, 5)
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	b := &testBundle{store: store, srv: openapitest.NewServer(t, &api.Server{Stores: store.API(),
		Queue: &queue.SQSSender{Client: client, QueueURL: qs.URL}})}

	require.NoError(t, sqsSrv.Pause())
	t.Cleanup(func() { _ = sqsSrv.Resume() })
	for _, key := range []string{"", "stalled-queue-1"} {
		req, err := http.NewRequest("POST", b.srv.URL+"/events/async", nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		start := time.Now()
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		took := time.Since(start)
		require.Equal(t, http.StatusAccepted, resp.StatusCode, "key %q", key)
		require.Less(t, took, 5*time.Second, "key %q: answered within the send's bound, well inside the API function's 10 s", key)
	}
	n, err := store.Events.Count(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "both committed")
	status, pending, _ := b.do(t, "GET", "/events?state=pending", "")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, pending["events"], 2, "left pending, for the sweeper")
}
