package sqsbatch_test

import (
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/exactlyonce/exactlyonce/internal/testenv"
	"github.com/stretchr/testify/require"
)

// Many concurrent callers, few flushers: every message arrives exactly once, each caller is told
// of its own, and the calls were batched.
func TestConcurrentSendsArriveOnceEach(t *testing.T) {
	t.Parallel()
	client := testenv.SQS(t)
	q := testenv.Queues(t, client, 30, 5)
	s := sqsbatch.New(client, q.URL, sqsbatch.Config{Flushers: 2})
	ctx := context.Background()

	const callers, each = 32, 10
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs <- s.Send(ctx, int64(1+c*each+i))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	got := map[int64]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < callers*each && time.Now().Before(deadline) {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		for _, m := range out.Messages {
			id, err := queue.Decode(aws.ToString(m.Body))
			require.NoError(t, err)
			got[id]++
			_, err = client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
	}
	require.Len(t, got, callers*each)
	for id, n := range got {
		require.Equal(t, 1, n, "message %d", id)
	}
}

// A queue that does not exist: every caller gets the error, none hangs.
func TestEveryCallerLearnsOfAFailure(t *testing.T) {
	t.Parallel()
	client := testenv.SQS(t)
	q := testenv.Queues(t, client, 30, 5)
	s := sqsbatch.New(client, q.URL+"-missing", sqsbatch.Config{Flushers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Send(ctx, int64(i+1))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.Error(t, err)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
	}
}

// SQS reports per-entry failures in a 200 response; goaws never does, so a loopback endpoint
// speaking the JSON protocol plays SQS here: the entry it names as failed fails, the others succeed.
func TestPartialBatchFailureReachesItsCaller(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Entries []struct{ Id, MessageBody string }
		}
		require.NoError(t, json.NewDecoder(r.Body).Decode(&in))
		mu.Lock()
		calls++
		mu.Unlock()
		var ok, failed []map[string]any
		for _, e := range in.Entries {
			if e.MessageBody == queue.Encode(13) {
				failed = append(failed, map[string]any{"Id": e.Id, "Code": "InternalError", "Message": "boom", "SenderFault": false})
			} else {
				ok = append(ok, map[string]any{"Id": e.Id, "MessageId": "m" + e.Id, "MD5OfMessageBody": fmt.Sprintf("%x", md5.Sum([]byte(e.MessageBody)))})
			}
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_ = json.NewEncoder(w).Encode(map[string]any{"Successful": ok, "Failed": failed})
	}))
	t.Cleanup(srv.Close)
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	s := sqsbatch.New(client, srv.URL+"/000000000000/q", sqsbatch.Config{Flushers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Send(ctx, int64(i+1))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i+1 == 13 {
			require.ErrorContains(t, err, "boom")
		} else {
			require.NoError(t, err, "message %d", i+1)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Less(t, calls, 20, "sends were batched")
}
