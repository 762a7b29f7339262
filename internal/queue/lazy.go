package queue

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// MessageSender is what SQSSender needs of SQS (an *sqs.Client and a *LazyClient have it).
type MessageSender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// LazyClient is an SQS client built at its first call, for a Lambda whose first invocations mostly
// make none: the api function sends only for async creates and retried tasks, the processor only
// extends the visibility of a batch slower than its heartbeat (sqsbatch.Visibility). Building it
// at init (config.LoadDefaultConfig and the client, about 0.15-0.2 ms of a 5 ms cold start
// measured with GODEBUG=inittrace=1 and a phase timer; docs/performance.md, "Lambda start-up") was
// paid by every cold start. The build runs once, whether it succeeds or fails; a failure is every
// call's error, which the callers treat as SQS's own (the api leaves its events to the sweeper, the
// visibility extension makes none and says why). Safe for concurrent use.
type LazyClient struct {
	client func() (*sqs.Client, error)
}

// OnFirstUse returns the client that build makes at the first call.
func OnFirstUse(build func() (*sqs.Client, error)) *LazyClient {
	return &LazyClient{client: sync.OnceValues(build)}
}

// Client returns the client, building it if no call has yet.
func (c *LazyClient) Client() (*sqs.Client, error) { return c.client() }

// SendMessage is the client's SendMessage.
func (c *LazyClient) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	client, err := c.client()
	if err != nil {
		return nil, err
	}
	return client.SendMessage(ctx, in, opts...)
}

// ChangeMessageVisibility is the client's ChangeMessageVisibility.
func (c *LazyClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	client, err := c.client()
	if err != nil {
		return nil, err
	}
	return client.ChangeMessageVisibility(ctx, in, opts...)
}

// GetQueueAttributes is the client's GetQueueAttributes.
func (c *LazyClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	client, err := c.client()
	if err != nil {
		return nil, err
	}
	return client.GetQueueAttributes(ctx, in, opts...)
}
