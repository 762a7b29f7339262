package local

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The local run's counter service: a message sent to the counters queue is counted, the API
// reads the sum, and the notification reaches the counter-results queue through the topic.
func TestLocalRunCountsAndNotifies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := localsqs.Start("") // its own endpoint: the queues have fixed names
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	client := localsqs.NewClient(srv.URL)
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	awsCfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")}
	c, err := EnsureCounters(ctx, client, awsCfg, srv.URL, log)
	require.NoError(t, err)
	events, err := queue.Ensure(ctx, client, queue.QueueSpec{Name: "events", VisibilityTimeout: 30, MaxReceiveCount: 5})
	require.NoError(t, err)
	sys, err := Start(ctx, store, client, Options{HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, Queues: events, Counters: c}, log)
	require.NoError(t, err)

	_, err = client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(c.Queues.URL),
		MessageBody: aws.String(`{"entityId":"m1","entityType":"message","userId":"alice","action":"added"}`)})
	require.NoError(t, err)
	testutil.Eventually(t, 30*time.Second, "the sum read through the API", func() bool {
		resp, err := http.Get(sys.URL + "/counters/alice/message")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v struct{ Sum int64 }
		return json.NewDecoder(resp.Body).Decode(&v) == nil && v.Sum == 1
	})
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(c.ResultsURL), WaitTimeSeconds: 10})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	var r exactlyonce.CounterResult
	require.NoError(t, json.Unmarshal([]byte(aws.ToString(out.Messages[0].Body)), &r))
	require.Equal(t, exactlyonce.CounterResult{ID: r.ID, EntityID: "m1", EntityType: "message", UserID: "alice",
		Action: "added", Applied: true, Sum: 1, Version: 1}, r)
	cancel()
	require.NoError(t, sys.Wait())
}
