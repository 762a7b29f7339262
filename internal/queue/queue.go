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
	"io"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// Message bodies. A message names one pending event, {"id": N}, or several, {"ids": [N, ...]}: a
// process that creates events for many concurrent requests (internal/api/group.go) stores them with one
// INSERT and names them all in one message, where one message each would cost a queue call each.

// MaxIDs is the most events one message may name: about 2 KB of body, far below SQS's 256 KB, and
// few enough that one processing transaction takes the ids of a whole batch of such messages.
const MaxIDs = 100

// Encode returns the body of the message naming one pending event: {"id": N}.
func Encode(id int64) string { return `{"id":` + strconv.FormatInt(id, 10) + `}` }

// EncodeIDs returns the body of the message naming the given pending events: {"id": N} for one,
// {"ids": [N, ...]} for more. It is for at most MaxIDs ids.
func EncodeIDs(ids []int64) string {
	if len(ids) == 1 {
		return Encode(ids[0])
	}
	b := make([]byte, 0, 8+12*len(ids))
	b = append(b, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, "]}"...))
}

// Decode parses a message body into the ids it names. It accepts only a JSON object with exactly
// one field: id, a positive integer literal, or ids, a list of 1 to MaxIDs of them, so that a
// corrupted message is reported as failed rather than processed wrongly. The names are matched
// exactly, a name given twice is refused, and so are unknown names and anything after the object:
// encoding/json would match "ID" to id and let the last of two names win, so a body that says two
// things would be read as one of them.
func Decode(body string) ([]int64, error) {
	ids, err := decode(body)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errors.New("it ends early")
	}
	if err != nil {
		return nil, fmt.Errorf(`message body is not {"id": <positive integer>} or {"ids": [...]}: %w`, err)
	}
	return ids, nil
}

// decode reads body token by token: '{', then names and values, '}', then nothing.
func decode(body string) ([]int64, error) {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber() // numbers as their literal text, checked by parseID
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var id, ids []int64 // what each field gave; nil: not seen
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string) // inside an object, the decoder gives a name or an error
		if !ok {
			return nil, errors.New("not a JSON object")
		}
		switch {
		case name == "id" && id == nil:
			if id, err = readID(dec); err != nil {
				return nil, err
			}
		case name == "ids" && ids == nil:
			if ids, err = readIDs(dec); err != nil {
				return nil, err
			}
		case name == "id" || name == "ids":
			return nil, fmt.Errorf("field %q twice", name)
		default:
			return nil, fmt.Errorf("unknown field %q", bound(name))
		}
	}
	if _, err := dec.Token(); err != nil { // '}': More said there is no other name
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	switch {
	case id != nil && ids != nil:
		return nil, errors.New("both id and ids")
	case id != nil:
		return id, nil
	case ids != nil:
		return ids, nil
	}
	return nil, errors.New("no id")
}

// readID reads the value of id: one positive integer.
func readID(dec *json.Decoder) ([]int64, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	id, err := parseID(tok)
	if err != nil {
		return nil, err
	}
	return []int64{id}, nil
}

// readIDs reads the value of ids: a list of 1 to MaxIDs positive integers.
func readIDs(dec *json.Decoder) ([]int64, error) {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, errors.New("ids is not a list")
	}
	ids := []int64{}
	for dec.More() {
		if len(ids) == MaxIDs {
			return nil, fmt.Errorf("more than %d ids", MaxIDs)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		id, err := parseID(tok)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if _, err := dec.Token(); err != nil { // ']'
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("ids is empty; it must name 1 to %d", MaxIDs)
	}
	return ids, nil
}

// parseID accepts a positive integer literal that fits an int64: no sign, exponent, fraction,
// leading zero or quotes.
func parseID(tok json.Token) (int64, error) {
	num, ok := tok.(json.Number)
	if !ok {
		return 0, fmt.Errorf("an id is %s, not a positive integer", kind(tok))
	}
	raw := string(num)
	if raw[0] < '1' || raw[0] > '9' || strings.Trim(raw, "0123456789") != "" {
		return 0, fmt.Errorf("id %.20s is not a positive integer", raw)
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("id %.20s is out of range", raw)
	}
	return id, nil
}

// kind names what a token that is not a number is, for an error.
func kind(tok json.Token) string {
	switch tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	}
	return "an object or a list"
}

// bound cuts a name from the body to a length fit for an error.
func bound(s string) string {
	if len(s) > 32 {
		return strings.ToValidUTF8(s[:32], "") + "..."
	}
	return s
}

// Sender sends a message naming pending events (1 to MaxIDs of them).
type Sender interface {
	Send(ctx context.Context, ids []int64) error
}

// SQSSender sends to one SQS queue.
type SQSSender struct {
	Client   MessageSender // an *sqs.Client, or a LazyClient
	QueueURL string
}

// Send sends one message naming ids, and counts it on the Recorder ctx carries (QueueSends, or
// QueueSendFailures when it failed).
func (s *SQSSender) Send(ctx context.Context, ids []int64) error {
	_, err := s.Client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:    aws.String(s.QueueURL),
		MessageBody: aws.String(EncodeIDs(ids)),
	})
	if err != nil {
		metrics.From(ctx).Add(metrics.QueueSendFailures, 1)
	} else {
		metrics.From(ctx).Add(metrics.QueueSends, 1)
	}
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
