package sqsbatch_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/stretchr/testify/require"
)

// recordingClient passes every call to the real SQS client and records the visibility timeouts
// the handler asked for.
type recordingClient struct {
	*sqs.Client
	mu   sync.Mutex
	sets []int32
}

func (c *recordingClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	c.mu.Lock()
	c.sets = append(c.sets, in.VisibilityTimeout)
	c.mu.Unlock()
	return c.Client.ChangeMessageVisibility(ctx, in, opts...)
}

func (c *recordingClient) calls() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int32(nil), c.sets...)
}

// A batch that runs past the heartbeat must only ever extend its messages' visibility: the queue
// gave them 30 s, and an extension of 1 s set after 100 ms would make them visible again 29 s
// early, to be delivered to a second worker meanwhile.
func TestHeartbeatNeverShortensTheQueuesVisibility(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	ctx := context.Background()
	batch := receiveOne(t, client, q)

	rec := &recordingClient{Client: client}
	h := &sqsbatch.Handler[int]{Decode: strconv.Atoi,
		Visibility: &sqsbatch.Visibility{Client: rec, QueueURL: q.URL, Heartbeat: 100 * time.Millisecond, Extension: time.Second},
		Work: func(context.Context, []sqsbatch.Message[int]) ([]string, error) {
			testutil.Eventually(t, 10*time.Second, "a heartbeat extended the batch", func() bool { return len(rec.calls()) >= 2 })
			return nil, nil
		}}
	_, err := h.Handle(ctx, batch)
	require.NoError(t, err)
	for _, v := range rec.calls() {
		require.GreaterOrEqual(t, v, int32(30), "every extension keeps at least the queue's own visibility timeout")
	}
}

// A heartbeat no shorter than the queue's visibility timeout extends nothing in time: a batch
// slower than the queue's timeout has its messages delivered again before the first extension
// (each such delivery finds its events busy and counts towards the DLQ). Config cannot see the
// queue's timeout, so the handler says so, once per queue, when it first reads it; before, such a
// VISIBILITY_HEARTBEAT was taken without a word.
func TestAHeartbeatTooLongForTheQueueIsSaidOnce(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 1, 5)
	ctx := context.Background()
	batch := receiveOne(t, client, q)

	logs := &testutil.Buffer{}
	rec := &recordingClient{Client: client}
	h := &sqsbatch.Handler[int]{Name: "test", Decode: strconv.Atoi, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Visibility: &sqsbatch.Visibility{Client: rec, QueueURL: q.URL, Heartbeat: 1500 * time.Millisecond, Extension: 5 * time.Second},
		Work: func(context.Context, []sqsbatch.Message[int]) ([]string, error) {
			testutil.Eventually(t, 20*time.Second, "two heartbeats", func() bool { return len(rec.calls()) >= 2 })
			return nil, nil
		}}
	_, err := h.Handle(ctx, batch)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(logs.String(), "the heartbeat is not shorter than the queue's visibility timeout"), logs.String())
	require.Contains(t, logs.String(), `"heartbeat":"1.5s"`)
	require.Contains(t, logs.String(), `"queueVisibilityTimeout":"1s"`)
	require.Contains(t, logs.String(), `"level":"WARN"`)
}

// receiveOne sends one message ("1") to q and receives it, as the event source mapping hands a
// batch of it to the handler.
func receiveOne(t *testing.T, client *sqs.Client, q queue.Queues) events.SQSEvent {
	t.Helper()
	ctx := context.Background()
	_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("1")})
	require.NoError(t, err)
	// Long polling up to 20 s: it answers once the message is there (1 s was a bound on how soon a
	// loaded machine's local queue hands it out).
	got, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 20})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	m := got.Messages[0]
	return events.SQSEvent{Records: []events.SQSMessage{{MessageId: aws.ToString(m.MessageId),
		ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body), EventSourceARN: q.ARN}}}
}
