// Package queue is the SQS side of the system: the message that names a pending event, the sender
// the API uses after an async insert commits, and the creation of the queue and its dead-letter
// queue for local runs and tests. The endpoint is the SDK's business: the standard
// AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_SQS variables point it at goaws, LocalStack or AWS.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Encode returns the body of the message naming one pending event: {"id": N}.
func Encode(id int64) string { return `{"id":` + strconv.FormatInt(id, 10) + `}` }

// Decode parses a message body. It accepts only a JSON object whose one field, id, is a positive
// integer literal, so that a corrupted message is reported as failed rather than processed wrongly.
func Decode(body string) (int64, error) {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return 0, fmt.Errorf("message body is not {\"id\": <positive integer>}: %w", err)
	}
	if dec.More() {
		return 0, errors.New("message body has trailing data")
	}
	raw := string(m.ID)
	if raw == "" || raw == "null" {
		return 0, errors.New("message body has no id")
	}
	if raw[0] < '1' || raw[0] > '9' || strings.Trim(raw, "0123456789") != "" {
		return 0, fmt.Errorf("message id %.20s is not a positive integer", raw)
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("message id %.20s is out of range", raw)
	}
	return id, nil
}

// Sender sends messages naming pending events.
type Sender interface {
	Send(ctx context.Context, id int64) error
}

// SQSSender sends to one SQS queue.
type SQSSender struct {
	Client   *sqs.Client
	QueueURL string
}

func (s *SQSSender) Send(ctx context.Context, id int64) error {
	_, err := s.Client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:    aws.String(s.QueueURL),
		MessageBody: aws.String(Encode(id)),
	})
	return err
}

// Queues names a queue and its dead-letter queue.
type Queues struct {
	URL, ARN       string
	DLQURL, DLQARN string
}

// QueueSpec describes a queue to create with its dead-letter queue.
type QueueSpec struct {
	Name              string
	VisibilityTimeout int // seconds
	MaxReceiveCount   int // receives before a message moves to the DLQ
}

// Ensure creates the queue and its DLQ if they do not exist (CreateQueue is idempotent for equal
// attributes) and sets the redrive policy. For local runs and tests; in AWS the CDK stack owns them.
func Ensure(ctx context.Context, client *sqs.Client, spec QueueSpec) (Queues, error) {
	var q Queues
	dlq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(spec.Name + "-dlq"),
		Attributes: map[string]string{"MessageRetentionPeriod": "1209600"},
	})
	if err != nil {
		return q, fmt.Errorf("create DLQ: %w", err)
	}
	q.DLQURL = aws.ToString(dlq.QueueUrl)
	if q.DLQARN, err = arnOf(ctx, client, q.DLQURL); err != nil {
		return q, err
	}
	redrive, _ := json.Marshal(map[string]any{"deadLetterTargetArn": q.DLQARN, "maxReceiveCount": spec.MaxReceiveCount})
	main, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(spec.Name),
		Attributes: map[string]string{
			"VisibilityTimeout": strconv.Itoa(spec.VisibilityTimeout),
			"RedrivePolicy":     string(redrive),
		},
	})
	if err != nil {
		return q, fmt.Errorf("create queue: %w", err)
	}
	q.URL = aws.ToString(main.QueueUrl)
	q.ARN, err = arnOf(ctx, client, q.URL)
	return q, err
}

func arnOf(ctx context.Context, client *sqs.Client, url string) (string, error) {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", fmt.Errorf("queue attributes of %s: %w", url, err)
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)], nil
}
