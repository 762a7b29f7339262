// Package mapping is a local stand-in for Lambda's SQS event source mapping: it long-polls a queue,
// hands batches to the processor's handler as events.SQSEvent, and deletes only the messages the
// handler did not report as failed. Failed messages are left alone: they reappear after the queue's
// visibility timeout, and move to the dead-letter queue after its maxReceiveCount, as in AWS.
//
// It keeps AWS's contract (see docs/aws-notes.md): an error from the handler fails the whole
// batch; so does a failure naming an empty or unknown message id.
package mapping

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Handler is the processor's Lambda handler.
type Handler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// DefaultConcurrency is Config.Concurrency's default.
const DefaultConcurrency = 4

// Config configures a Mapping. Zero values take the defaults shown.
type Config struct {
	QueueURL string
	QueueARN string // put in each record's eventSourceARN
	Region   string // put in each record's awsRegion; default us-east-1
	// BatchSize is the most messages handed to one invocation; SQS returns at most 10 per receive.
	BatchSize int // default 10
	// Concurrency is the number of pollers, each invoking the handler with its own batches, like
	// the mapping's maximum concurrency. Default 4.
	Concurrency int
	// WaitTime is the long-poll wait of each receive. Default 1 s: short enough to stop promptly.
	WaitTime time.Duration
	// Timeout is the deadline given to each invocation, like a function timeout. Default 30 s.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Stats counts what the mapping did. Safe for concurrent use.
type Stats struct {
	mu                                          sync.Mutex
	Batches, Received, Deleted, Failed, Errored int64
}

func (s *Stats) add(received, deleted, failed int, errored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Batches++
	s.Received += int64(received)
	s.Deleted += int64(deleted)
	s.Failed += int64(failed)
	if errored {
		s.Errored++
	}
}

// Snapshot returns a copy of the counters.
func (s *Stats) Snapshot() (batches, received, deleted, failed, errored int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Batches, s.Received, s.Deleted, s.Failed, s.Errored
}

// Mapping polls one queue for one handler.
type Mapping struct {
	client  *sqs.Client
	handler Handler
	cfg     Config
	Stats   Stats
}

// New returns a Mapping; Run starts it.
func New(client *sqs.Client, handler Handler, cfg Config) *Mapping {
	cfg.BatchSize = min(cmp.Or(cfg.BatchSize, 10), 10)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	cfg.WaitTime = cmp.Or(cfg.WaitTime, time.Second)
	cfg.Timeout = cmp.Or(cfg.Timeout, 30*time.Second)
	cfg.Region = cmp.Or(cfg.Region, "us-east-1")
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Mapping{client: client, handler: handler, cfg: cfg}
}

// Config returns the configuration in effect, defaults filled in.
func (m *Mapping) Config() Config { return m.cfg }

// Run polls until ctx is cancelled. A batch being handled when ctx is cancelled is finished first.
func (m *Mapping) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range m.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := m.PollOnce(ctx); err != nil && ctx.Err() == nil {
					m.cfg.Logger.Warn("mapping: poll failed", "queue", m.cfg.QueueURL, "err", err)
					select { // the queue is unreachable: do not spin
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// PollOnce receives one batch (waiting up to WaitTime), invokes the handler with it and deletes the
// messages that succeeded. It returns how many messages it received.
func (m *Mapping) PollOnce(ctx context.Context) (int, error) {
	out, err := m.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(m.cfg.QueueURL),
		MaxNumberOfMessages: int32(m.cfg.BatchSize),
		WaitTimeSeconds:     int32(max(m.cfg.WaitTime/time.Second, 1)),
		// Both spellings, for endpoints that know only the older attribute name.
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		AttributeNames:              []types.QueueAttributeName{types.QueueAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return 0, fmt.Errorf("receive: %w", err)
	}
	if len(out.Messages) == 0 {
		return 0, nil
	}
	ev := m.event(out.Messages)
	// The invocation runs to its own deadline even if the mapping is being stopped, as Lambda lets
	// a running invocation finish.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.Timeout)
	defer cancel()
	resp, herr := m.handler(ictx, ev)
	failed, ferr := failedIDs(resp, ev)
	if herr != nil || ferr != nil {
		m.Stats.add(len(out.Messages), 0, len(out.Messages), true)
		m.cfg.Logger.Warn("mapping: batch failed as a whole; every message will be retried",
			"messages", len(out.Messages), "err", cmp.Or(herr, ferr))
		return len(out.Messages), nil
	}
	var del []types.DeleteMessageBatchRequestEntry
	for i, msg := range out.Messages {
		if !failed[aws.ToString(msg.MessageId)] {
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: msg.ReceiptHandle})
		}
	}
	deleted := 0
	if len(del) > 0 {
		dout, err := m.client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{
			QueueUrl: aws.String(m.cfg.QueueURL), Entries: del,
		})
		if err != nil {
			// Not deleted means delivered again: the processor acknowledges already processed events.
			m.cfg.Logger.Warn("mapping: delete failed; messages will be delivered again", "err", err)
		} else {
			deleted = len(dout.Successful)
		}
	}
	m.Stats.add(len(out.Messages), deleted, len(failed), false)
	return len(out.Messages), nil
}

func (m *Mapping) event(msgs []types.Message) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, 0, len(msgs))}
	for _, msg := range msgs {
		attrs := map[string]string{}
		for k, v := range msg.Attributes {
			attrs[k] = v
		}
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId:      aws.ToString(msg.MessageId),
			ReceiptHandle:  aws.ToString(msg.ReceiptHandle),
			Body:           aws.ToString(msg.Body),
			Md5OfBody:      aws.ToString(msg.MD5OfBody),
			Attributes:     attrs,
			EventSource:    "aws:sqs",
			EventSourceARN: m.cfg.QueueARN,
			AWSRegion:      m.cfg.Region,
		})
	}
	return ev
}

// failedIDs validates the handler's response as Lambda does: every identifier must name a message
// of the batch, or the whole batch fails.
func failedIDs(resp events.SQSEventResponse, ev events.SQSEvent) (map[string]bool, error) {
	known := map[string]bool{}
	for _, r := range ev.Records {
		known[r.MessageId] = true
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		if f.ItemIdentifier == "" || !known[f.ItemIdentifier] {
			return nil, errors.New("batch item failure names no message of the batch: " + strconv.Quote(f.ItemIdentifier))
		}
		failed[f.ItemIdentifier] = true
	}
	return failed, nil
}
