package localsqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

var (
	shared    *Server
	sharedErr error
	startOnce sync.Once
)

// Endpoint returns the SQS endpoint tests use: AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL when set
// (LocalStack, a running goaws, ...), otherwise a local goaws started (Start) once for this test
// binary, and killed with it.
func Endpoint(t testing.TB) string {
	t.Helper()
	for _, k := range []string{"AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	startOnce.Do(func() { shared, sharedErr = Start("") })
	if sharedErr != nil {
		t.Fatalf("local SQS: %v", sharedErr)
	}
	return shared.URL
}

// Client returns a client for Endpoint. Credentials and region come from the environment when set
// (for LocalStack or AWS) and are dummies otherwise.
func Client(t testing.TB) *sqs.Client {
	t.Helper()
	return NewClient(Endpoint(t))
}

// Queues creates a queue with a unique name and its DLQ, for one test, and deletes them when it ends.
func Queues(t testing.TB, client *sqs.Client, visibilityTimeout, maxReceiveCount int) queue.Queues {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Ensure(ctx, client, queue.QueueSpec{
		Name: "t-" + hex.EncodeToString(b), VisibilityTimeout: visibilityTimeout, MaxReceiveCount: maxReceiveCount,
	})
	if err != nil {
		t.Fatalf("create test queues: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.URL)})
		_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.DLQURL)})
	})
	return q
}
