package sqsbatch

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// VisibilityClient is what the extension needs of SQS (an *sqs.Client has it):
// ChangeMessageVisibility, one message at a time, rather than the batch call (local emulators,
// goaws, implement only this one, and a batch has at most a handful of messages), and
// GetQueueAttributes, to read the queue's own visibility timeout once (the event source mapping's
// permissions include it).
type VisibilityClient interface {
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// Visibility extends the visibility timeout of a batch's messages while the batch is being
// handled, as AWS advises for slow work (docs/aws-notes.md). After Heartbeat, and every Heartbeat
// after that until the handler returns, each message of the batch is made invisible for another
// Extension from that moment. A batch that finishes within Heartbeat makes no call at all.
//
// Correctness must never depend on it (for the event processor it does not: an event is settled
// once whatever the queue does, because the claim is a row lock and the settling write is guarded).
// It saves the second delivery, and with it a busy failure and a wasted receive on the way to the
// DLQ.
//
// An extension only ever extends: each sets at least the queue's own visibility timeout (read once
// per queue with GetQueueAttributes), counted from that moment, which is later than the deadline the
// receive gave; setting Extension alone, if it were shorter, would make the messages visible early.
// If the queue's timeout cannot be read, no extension is made (the messages keep what the queue
// gave them) and a warning says why.
//
// Extension must be longer than Heartbeat, and Heartbeat shorter than the queue's visibility
// timeout; in AWS the function's timeout is also below it (the mapping requires that), so the
// extension matters for slow batches on queues whose timeout is close to the function's.
type Visibility struct {
	// Client makes the calls. Required.
	Client VisibilityClient
	// QueueURL is the queue the messages come from. Empty: derived from each record's
	// eventSourceARN (arn:aws:sqs:region:account:name). The SDK sends the call to its own endpoint
	// (AWS_ENDPOINT_URL_SQS), whatever host the URL names.
	QueueURL string
	// Heartbeat is how long after the batch starts, and then how often, visibility is extended.
	// Default 10 s.
	Heartbeat time.Duration
	// Extension is the visibility timeout each heartbeat sets, counted from that moment. Default
	// 60 s; at least twice Heartbeat is sensible, so one lost call does not let a message go.
	Extension time.Duration
	// Extended counts the successful extensions (one per message per heartbeat), for tests and
	// metrics. Safe for concurrent use.
	Extended atomic.Int64

	timeouts sync.Map // queue URL -> its visibility timeout (time.Duration), read once
	warned   sync.Map // queue URL -> true once a heartbeat too long for it was said
}

// queueTimeout returns the visibility timeout of the queue at url, read once and remembered.
func (v *Visibility) queueTimeout(ctx context.Context, url string) (time.Duration, error) {
	if d, ok := v.timeouts.Load(url); ok {
		return d.(time.Duration), nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	out, err := v.Client.GetQueueAttributes(cctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout}})
	if err != nil {
		return 0, err
	}
	secs, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
	if err != nil || secs < 0 {
		return 0, fmt.Errorf("queue %s has no readable VisibilityTimeout attribute (%q)", url,
			out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
	}
	d := time.Duration(secs) * time.Second
	v.timeouts.Store(url, d)
	return d, nil
}

// keep starts extending the records' visibility and returns the function that stops it. wg is
// done once no call is in flight.
func (v *Visibility) keep(ctx context.Context, records []events.SQSMessage, log *slog.Logger, wg *sync.WaitGroup) (stop func()) {
	heartbeat := cmp.Or(v.Heartbeat, 10*time.Second)
	extension := cmp.Or(v.Extension, 60*time.Second)
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, r := range records {
				select {
				case <-done:
					return
				default:
				}
				url := v.QueueURL
				if url == "" {
					var err error
					if url, err = QueueURLFromARN(r.EventSourceARN); err != nil {
						log.Warn("sqsbatch: cannot extend visibility", "messageId", r.MessageId, "err", err)
						continue
					}
				}
				queueTimeout, err := v.queueTimeout(ctx, url)
				if err != nil {
					// Without it an extension might shorten what the queue gave: make none.
					log.Warn("sqsbatch: cannot read the queue's visibility timeout; not extending", "queue", url, "err", err)
					continue
				}
				if heartbeat >= queueTimeout {
					if _, said := v.warned.LoadOrStore(url, true); !said {
						// Config cannot see the queue's timeout: said here, once per queue, when it
						// first matters (a batch slower than the heartbeat).
						log.Warn("sqsbatch: the heartbeat is not shorter than the queue's visibility timeout: "+
							"a batch slower than the queue's timeout has its messages delivered again before an extension "+
							"(VISIBILITY_HEARTBEAT)", "queue", url, "heartbeat", heartbeat.String(), "queueVisibilityTimeout", queueTimeout.String())
					}
				}
				// Not the handler's context: a call started just before the deadline still ends
				// cleanly, and is bounded on its own.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_, err = v.Client.ChangeMessageVisibility(cctx, &sqs.ChangeMessageVisibilityInput{
					QueueUrl:          aws.String(url),
					ReceiptHandle:     aws.String(r.ReceiptHandle),
					VisibilityTimeout: int32(max(max(extension, queueTimeout)/time.Second, 1)),
				})
				cancel()
				if err != nil {
					// The message may come back early; its event is still processed once.
					log.Warn("sqsbatch: visibility extension failed", "messageId", r.MessageId, "err", err)
					continue
				}
				v.Extended.Add(1)
			}
			log.Debug("sqsbatch: extended visibility", "messages", len(records), "for", extension.String())
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// QueueURLFromARN returns the URL of the SQS queue an ARN names: arn:aws:sqs:REGION:ACCOUNT:NAME
// is https://sqs.REGION.amazonaws.com/ACCOUNT/NAME.
func QueueURLFromARN(arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[4] == "" || parts[5] == "" {
		return "", fmt.Errorf("not an SQS queue ARN: %q", arn)
	}
	region := cmp.Or(parts[3], "us-east-1")
	host := "sqs." + region + ".amazonaws.com"
	if strings.HasPrefix(parts[1], "aws-cn") {
		host += ".cn"
	}
	return "https://" + host + "/" + parts[4] + "/" + parts[5], nil
}
