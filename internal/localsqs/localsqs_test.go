package localsqs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/stretchr/testify/require"
)

// The endpoint tests share answers, and queue.Depth counts a message as visible until it is
// received, then as in flight (and no longer visible) until it is deleted, as SQS does: goaws
// counted it as visible too, which tools/sqslocal corrects.
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
	visible, inFlight = depth()
	require.Equal(t, [2]int{0, 1}, [2]int{visible, inFlight}, "received: in flight, not visible")

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

// Queues created and deleted while other clients send to and receive from theirs do not bring the
// endpoint down. goaws reads its queue map without a lock in several actions, so a create or delete
// at the same moment was a fatal "concurrent map read and map write" that killed the whole process
// (and every test of the binary with it); sqslocal serialises the actions that change the map.
func TestQueueChurnBesideTrafficKeepsTheEndpointUp(t *testing.T) {
	t.Parallel()
	srv, err := localsqs.Start("")
	require.NoError(t, err)
	defer srv.Stop()
	client := localsqs.NewClient(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	steady, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("steady")})
	require.NoError(t, err)
	const rounds = 300
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	gctx := ctx
	g := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	for w := range 4 {
		g(func() error { // churn: create and delete queues
			for i := range rounds {
				out, err := client.CreateQueue(gctx, &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("churn-%d-%d", w, i))})
				if err != nil {
					return err
				}
				if _, err := client.DeleteQueue(gctx, &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}); err != nil {
					return err
				}
			}
			return nil
		})
		g(func() error { // traffic: send and receive on a queue that stays
			for range rounds {
				if _, err := client.SendMessage(gctx, &sqs.SendMessageInput{QueueUrl: steady.QueueUrl, MessageBody: aws.String("m")}); err != nil {
					return err
				}
				out, err := client.ReceiveMessage(gctx, &sqs.ReceiveMessageInput{QueueUrl: steady.QueueUrl, MaxNumberOfMessages: 10})
				if err != nil {
					return err
				}
				for _, m := range out.Messages {
					if _, err := client.DeleteMessage(gctx, &sqs.DeleteMessageInput{QueueUrl: steady.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "every call answered: the endpoint stayed up")
	}
}

// A long poll waits for a message and returns it once it is sent, and queues can be created while it
// waits (sqslocal long-polls by receives that do not wait, so that it never holds a create back).
func TestLongPollWaitsForASendWithoutHoldingCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	got := make(chan *sqs.ReceiveMessageOutput, 1)
	go func() {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 1, WaitTimeSeconds: 20})
		if err != nil {
			out = nil
		}
		got <- out
	}()
	other := localsqs.Queues(t, client, 30, 5) // created while the receive waits, or before it starts
	require.NotEmpty(t, other.URL)
	select {
	case out := <-got:
		t.Fatalf("the long poll returned before any message was sent: %+v", out)
	default:
	}
	_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("hello")})
	require.NoError(t, err)
	out := <-got
	require.NotNil(t, out, "the receive failed")
	require.Len(t, out.Messages, 1)
	require.Equal(t, "hello", aws.ToString(out.Messages[0].Body))
}
