package counters

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQSPublisher publishes notifications as messages of one SQS queue (the local runs'
// counter-results queue), ten per SendMessageBatch call.
type SQSPublisher struct {
	Client   *sqs.Client
	QueueURL string
}

// Publish sends every notification and returns the ids of those the queue accepted.
func (p *SQSPublisher) Publish(ctx context.Context, ns []Notification) ([]string, error) {
	var published []string
	var errs []error
	for start := 0; start < len(ns); start += 10 {
		chunk := ns[start:min(start+10, len(ns))]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, n := range chunk {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(n.ID), MessageBody: aws.String(string(n.Body))}
		}
		out, err := p.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(p.QueueURL), Entries: entries})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Every entry is either in Successful or in Failed; the local endpoint (goaws) answers the
		// JSON protocol without Successful, so an entry is taken as sent unless it failed.
		failed := map[string]bool{}
		for _, f := range out.Failed {
			failed[aws.ToString(f.Id)] = true
			errs = append(errs, fmt.Errorf("notification %s: %s", aws.ToString(f.Id), aws.ToString(f.Message)))
		}
		for _, n := range chunk {
			if !failed[n.ID] {
				published = append(published, n.ID)
			}
		}
	}
	return published, errors.Join(errs...)
}
