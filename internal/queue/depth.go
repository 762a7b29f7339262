package queue

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Depth returns how many messages a queue holds: visible ones (waiting to be received) and in-flight
// ones (received, neither deleted nor visible again yet). A queue is empty when both are 0. SQS
// calls both approximate (on AWS they may lag a change by about a minute), so a caller that waits
// for a depth polls. goaws (v0.5.4) counts in-flight messages among the visible ones too;
// tools/sqslocal corrects its answer, so that the local endpoint counts as SQS does. For tests, the
// chaos run and the benchmark; the product never asks.
func Depth(ctx context.Context, client *sqs.Client, url string) (visible, inFlight int, err error) {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible},
	})
	if err != nil {
		return 0, 0, fmt.Errorf("queue attributes of %s: %w", url, err)
	}
	// A missing or garbled attribute is an error, not 0: read as 0 it would make a queue look empty.
	attr := func(name types.QueueAttributeName) (int, error) {
		n, err := strconv.Atoi(out.Attributes[string(name)])
		if err != nil {
			return 0, fmt.Errorf("queue attribute %s of %s: %w", name, url, err)
		}
		return n, nil
	}
	if visible, err = attr(types.QueueAttributeNameApproximateNumberOfMessages); err != nil {
		return 0, 0, err
	}
	if inFlight, err = attr(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible); err != nil {
		return 0, 0, err
	}
	return visible, inFlight, nil
}
