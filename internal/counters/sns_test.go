package counters_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/stretchr/testify/require"
)

// Notifications published to an SNS topic (goaws's, through the query protocol, signed) reach a
// queue subscribed to it, each body as published.
func TestSNSPublisherDeliversThroughTheTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	p := &counters.SNSPublisher{Endpoint: localsqs.Endpoint(t), Batch: counters.LocalSNSBatch,
		AWS: aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")}}
	arn, err := p.CreateTopic(ctx, "t-results-"+fmt.Sprint(time.Now().UnixNano()))
	require.NoError(t, err)
	p.TopicARN = arn
	require.NoError(t, p.SubscribeQueue(ctx, q.ARN))
	var ns []counters.Notification
	var want []string
	for i := range 15 {
		body := fmt.Sprintf(`{"id":"n%d","sum":%d}`, i, i)
		ns = append(ns, counters.Notification{ID: fmt.Sprint("n", i), Body: []byte(body)})
		want = append(want, body)
	}
	published, err := p.Publish(ctx, ns)
	require.NoError(t, err)
	require.Len(t, published, 15)
	require.ElementsMatch(t, want, drain(t, client, q.URL, 15, 30*time.Second))
}
