package mapping_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mapping"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/stretchr/testify/require"
)

func send(t *testing.T, client *sqs.Client, url string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		_, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)})
		require.NoError(t, err)
	}
}

// bodies records the bodies the handler saw, with how often.
type bodies struct {
	mu   sync.Mutex
	seen map[string]int
}

func (b *bodies) add(ev events.SQSEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range ev.Records {
		b.seen[r.Body]++
	}
}

func (b *bodies) count(body string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[body]
}

func TestFailedMessagesComeBackAndEndInTheDLQ(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 1, 2) // visible again after 1 s; DLQ after 2 receives

	seen := &bodies{seen: map[string]int{}}
	handler := func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		seen.add(ev)
		var resp events.SQSEventResponse
		for _, r := range ev.Records {
			if r.Body == "poison" {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
			}
		}
		return resp, nil
	}
	m := mapping.New(client, handler, mapping.Config{QueueURL: q.URL, QueueARN: q.ARN, Concurrency: 1, WaitTime: time.Second})
	send(t, client, q.URL, "a", "poison", "b")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	testutil.Eventually(t, 30*time.Second, "the poison message is in the DLQ", func() bool {
		visible, _, err := queue.Depth(context.Background(), client, q.DLQURL)
		require.NoError(t, err)
		return visible == 1
	})
	cancel()
	require.NoError(t, <-done)

	require.Equal(t, 1, seen.count("a"), "a success is deleted, never delivered again")
	require.Equal(t, 1, seen.count("b"))
	require.Equal(t, 2, seen.count("poison"), "delivered up to maxReceiveCount, then moved")
	visible, inFlight, err := queue.Depth(context.Background(), client, q.URL)
	require.NoError(t, err)
	require.Zero(t, visible+inFlight, "the main queue is empty")
	_, received, deleted, failed, _ := m.Stats.Snapshot()
	require.EqualValues(t, 4, received)
	require.EqualValues(t, 2, deleted)
	require.EqualValues(t, 2, failed)
}

func TestHandlerErrorOrBadIdentifierFailsTheWholeBatch(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	for name, handler := range map[string]mapping.Handler{
		"error": func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{}, errors.New("boom")
		},
		"unknown identifier": func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: "no-such-message"}}}, nil
		},
		"empty identifier": func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ""}}}, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q := localsqs.Queues(t, client, 30, 5)
			send(t, client, q.URL, "x", "y")
			m := mapping.New(client, handler, mapping.Config{QueueURL: q.URL, QueueARN: q.ARN})
			got := 0
			for got < 2 {
				n, err := m.PollOnce(context.Background())
				require.NoError(t, err)
				got += n
			}
			_, _, deleted, failed, errored := m.Stats.Snapshot()
			require.Zero(t, deleted)
			require.EqualValues(t, 2, failed)
			require.Positive(t, errored)
			_, inFlight, err := queue.Depth(context.Background(), client, q.URL)
			require.NoError(t, err)
			require.Equal(t, 2, inFlight, "both messages wait for their visibility timeout")
		})
	}
}

func TestEnsureSetsTheRedrivePolicy(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 7, 5)
	out, err := client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	require.NoError(t, err)
	require.Contains(t, out.Attributes["RedrivePolicy"], q.DLQARN)
	require.Equal(t, "7", out.Attributes["VisibilityTimeout"])
	// Ensure is idempotent.
	again, err := queue.Ensure(context.Background(), client, queue.QueueSpec{Name: queueName(q.URL), VisibilityTimeout: 7, MaxReceiveCount: 5})
	require.NoError(t, err)
	require.Equal(t, q, again)
}

func queueName(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '/' {
			return url[i+1:]
		}
	}
	return url
}
