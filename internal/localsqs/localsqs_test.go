package localsqs_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/stretchr/testify/require"
)

// The endpoint tests share answers, and queue.Depth counts a message as visible until it is
// received, then as in flight until it is deleted (goaws still counts it as visible too: see
// queue.Depth).
func TestDepthFollowsAMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	depth := func() (int, int) {
		t.Helper()
		visible, inFlight, err := queue.Depth(ctx, client, q.URL)
		require.NoError(t, err)
		return visible, inFlight
	}
	visible, inFlight := depth()
	require.Zero(t, visible+inFlight, "a new queue is empty")

	require.NoError(t, (&queue.SQSSender{Client: client, QueueURL: q.URL}).Send(ctx, []int64{1}))
	visible, inFlight = depth()
	require.Equal(t, [2]int{1, 0}, [2]int{visible, inFlight}, "sent: visible")

	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 1})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	_, inFlight = depth()
	require.Equal(t, 1, inFlight, "received: in flight")

	_, err = client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: out.Messages[0].ReceiptHandle})
	require.NoError(t, err)
	visible, inFlight = depth()
	require.Zero(t, visible+inFlight, "deleted: gone")
}

// A queue that does not exist is an error, not an empty queue.
func TestDepthOfAMissingQueueIsAnError(t *testing.T) {
	t.Parallel()
	endpoint := localsqs.Endpoint(t)
	_, _, err := queue.Depth(context.Background(), localsqs.NewClient(endpoint), endpoint+"/000000000000/no-such-queue")
	require.Error(t, err)
}

// Start is the one way to start the endpoint; Stop ends it.
func TestStartAndStop(t *testing.T) {
	t.Parallel()
	srv, err := localsqs.Start("")
	require.NoError(t, err)
	require.Positive(t, srv.Pid())
	_, err = localsqs.NewClient(srv.URL).ListQueues(context.Background(), &sqs.ListQueuesInput{})
	require.NoError(t, err)
	srv.Stop()
}
