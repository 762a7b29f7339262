// Package redrive moves the messages of a dead-letter queue back to its source queue, once the cause
// that put them there is fixed (docs/runbook.md, "The DLQ has messages"): for cmd/redrive (make
// redrive) and the operators' console (internal/console).
//
// The DLQ is the one the source queue's RedrivePolicy names (deadLetterTargetArn), as on AWS and
// locally (queue.Ensure sets the same policy); a DLQ named explicitly must be that one (Resolve).
// Before a message is touched, the DLQ must be the dead-letter queue of the source queue alone
// (CheckSources): a redrive sends every message of the DLQ to the one source queue, so a DLQ that
// other queues' RedrivePolicies name too, or another queue's DLQ, is refused (ErrRefused). The check
// reads the queues' present configuration, not the messages: those a queue sent to the DLQ before
// its RedrivePolicy stopped naming it are not told apart.
//
// On AWS a redrive starts an SQS message move task (StartMessageMoveTask, from the DLQ to the
// source queue) and reports its progress until it ends. An endpoint that lacks that action (the
// local goaws, which answers an unknown action with a bare 400 "Bad Request") gets the messages
// moved one by one: received from the DLQ, sent to the source queue with the same body and message
// attributes, and deleted from the DLQ only after the send succeeded. A redrive is at least once: a
// message sent whose delete then fails is sent again by the next redrive, which both queues'
// consumers tolerate (an events message names events processed exactly once in the database; a
// counter message carries its own id).
package redrive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// SQS is what the one-by-one move and the dry run ask of SQS; *sqs.Client is one.
type SQS interface {
	GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ListDeadLetterSourceQueues(context.Context, *sqs.ListDeadLetterSourceQueuesInput, ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error)
	ListQueues(context.Context, *sqs.ListQueuesInput, ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error)
}

// Mover is SQS's message move tasks, which AWS has and goaws lacks; *sqs.Client is one.
type Mover interface {
	StartMessageMoveTask(context.Context, *sqs.StartMessageMoveTaskInput, ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error)
	ListMessageMoveTasks(context.Context, *sqs.ListMessageMoveTasksInput, ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error)
}

// Redrive moves the DLQ's messages to the source queue: with a message move task where the endpoint
// has them, reporting its progress every interval (which must be positive), one by one where it
// answers that it lacks the action. It returns how many messages moved (as the move task reports
// it, approximately, on AWS).
func Redrive(ctx context.Context, c *sqs.Client, q Queues, every time.Duration, out io.Writer) (int, error) {
	if err := checkInterval(every); err != nil {
		return 0, err
	}
	if err := CheckSources(ctx, c, q); err != nil {
		return 0, err
	}
	handle, err := StartMoveTask(ctx, c, q)
	if errors.Is(err, ErrNoMoveTasks) {
		fmt.Fprintf(out, "the endpoint lacks StartMessageMoveTask (%v): moving the messages one by one\n", err)
		return MoveOneByOne(ctx, c, q, out)
	}
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(out, "started message move task %s\n", handle)
	return AwaitMoveTask(ctx, c, q.DLQARN, handle, every, out)
}

// ErrNoMoveTasks is the error of an endpoint that lacks StartMessageMoveTask.
var ErrNoMoveTasks = errors.New("no message move tasks")

// StartMoveTask starts moving the DLQ's messages to the source queue, and returns the task's
// handle, or an error wrapping ErrNoMoveTasks when the endpoint answered that it lacks the action.
func StartMoveTask(ctx context.Context, m Mover, q Queues) (string, error) {
	rec := &recorder{}
	out, err := m.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{
		SourceArn: aws.String(q.DLQARN), DestinationArn: aws.String(q.SourceARN),
	}, rec.option)
	if err != nil {
		if why := unknownAction(err, rec); why != "" {
			return "", fmt.Errorf("%w: %s", ErrNoMoveTasks, why)
		}
		return "", fmt.Errorf("start message move task from %s to %s: %w", q.DLQARN, q.SourceARN, err)
	}
	return aws.ToString(out.TaskHandle), nil
}

// unknownAction says why err is an endpoint's answer that it lacks the action called, or "" if it
// is not: one of the error codes AWS's protocols give an unknown action (InvalidAction for the query
// protocol, UnknownOperationException for JSON), or goaws's answer, which is no SQS error at all but
// a bare 400 whose whole body is "Bad Request" (goaws v0.5.4, app/router/router.go, actionHandler).
func unknownAction(err error, rec *recorder) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch code := apiErr.ErrorCode(); code {
		case "InvalidAction", "UnknownOperationException", "UnknownOperation":
			return "error code " + code
		}
		return ""
	}
	if rec.status == http.StatusBadRequest && strings.TrimSpace(string(rec.body)) == "Bad Request" {
		return `HTTP 400 "Bad Request"`
	}
	return ""
}

// recorder keeps the status and the start of the body of the answers to the calls it is an option
// of, so that an answer the SDK cannot decode (goaws's to an unknown action) can still be told apart.
type recorder struct {
	next   aws.HTTPClient
	status int
	body   []byte
}

func (r *recorder) option(o *sqs.Options) { r.next, o.HTTPClient = o.HTTPClient, r }

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	resp, err := r.next.Do(req)
	if err != nil {
		return resp, err
	}
	r.status = resp.StatusCode
	r.body, err = io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(r.body), resp.Body), resp.Body}
	return resp, nil
}

// AwaitMoveTask reports the progress of the move task from dlqARN every interval (positive: each
// report is a ListMessageMoveTasks call) until it ends:
// nil when it completed, an error when it failed or was cancelled, or when ctx ends (the task goes on).
// ListMessageMoveTasks gives a task's handle only while it runs, so the task is the one with handle,
// or, once no task has it, the most recent one (the first listed): one task at a time can move from a
// queue, and this one was started last. It returns how many messages the task moved.
func AwaitMoveTask(ctx context.Context, m Mover, dlqARN, handle string, every time.Duration, out io.Writer) (int, error) {
	if err := checkInterval(every); err != nil {
		return 0, err
	}
	last := ""
	for {
		res, err := m.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlqARN), MaxResults: aws.Int32(10)})
		if ctx.Err() != nil {
			return 0, stopped(ctx, handle)
		}
		if err != nil {
			return 0, fmt.Errorf("list message move tasks of %s: %w", dlqARN, err)
		}
		var task *types.ListMessageMoveTasksResultEntry
		for i := range res.Results {
			if aws.ToString(res.Results[i].TaskHandle) == handle {
				task = &res.Results[i]
				break
			}
		}
		if task == nil && len(res.Results) > 0 {
			task = &res.Results[0]
		}
		if task == nil {
			return 0, fmt.Errorf("message move task %s: ListMessageMoveTasks of %s lists no task", handle, dlqARN)
		}
		status := aws.ToString(task.Status)
		total := "?"
		if task.ApproximateNumberOfMessagesToMove != nil {
			total = strconv.FormatInt(*task.ApproximateNumberOfMessagesToMove, 10)
		}
		line := fmt.Sprintf("move task %s: moved %d / %s", status, task.ApproximateNumberOfMessagesMoved, total)
		if line != last {
			fmt.Fprintln(out, line)
			last = line
		}
		switch status {
		case "COMPLETED":
			fmt.Fprintf(out, "done: moved %d messages from %s to their source queue\n", task.ApproximateNumberOfMessagesMoved, dlqARN)
			return int(task.ApproximateNumberOfMessagesMoved), nil
		case "FAILED":
			return int(task.ApproximateNumberOfMessagesMoved), fmt.Errorf("message move task failed after moving %d messages: %s", task.ApproximateNumberOfMessagesMoved, aws.ToString(task.FailureReason))
		case "CANCELLED", "CANCELLING":
			return int(task.ApproximateNumberOfMessagesMoved), fmt.Errorf("message move task %s after moving %d messages", strings.ToLower(status), task.ApproximateNumberOfMessagesMoved)
		}
		select {
		case <-ctx.Done():
			return 0, stopped(ctx, handle)
		case <-time.After(every):
		}
	}
}

// checkInterval refuses a progress interval of 0 or less, which would list the move tasks without
// pause until the task ends.
func checkInterval(every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("progress interval %v is not positive: the move task's progress would be read without pause", every)
	}
	return nil
}

func stopped(ctx context.Context, handle string) error {
	return fmt.Errorf("stopped watching; the message move task goes on (aws sqs cancel-message-move-task --task-handle %s stops it): %w", handle, ctx.Err())
}

// receiveVisibility is how long a message received by the one-by-one move stays invisible: time
// enough to send it and delete it. One that is not (the move failed) is made visible again at once.
const receiveVisibility = 60

// MoveOneByOne moves the DLQ's messages to the source queue: each is received, sent with the same
// body and message attributes, and deleted from the DLQ only once the send succeeded. It moves at
// most as many messages as the DLQ held at the start, so that a message that fails again and comes
// back to the DLQ during the move is not moved round and round. On an error it stops and makes the
// messages it received and did not send visible again; it returns how many it moved.
func MoveOneByOne(ctx context.Context, c SQS, q Queues, out io.Writer) (int, error) {
	total, err := visible(ctx, c, q.DLQURL)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(out, "the DLQ holds %d messages\n", total)
	moved := 0
	for moved < total {
		res, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(q.DLQURL), MaxNumberOfMessages: int32(min(10, total-moved)),
			VisibilityTimeout: receiveVisibility, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return moved, summary(moved, total, fmt.Errorf("receive from the DLQ: %w", err))
		}
		if len(res.Messages) == 0 {
			break
		}
		for i, m := range res.Messages {
			if err := moveOne(ctx, c, q, m); err != nil {
				release(c, q.DLQURL, res.Messages[i:])
				return moved, summary(moved, total, err)
			}
			moved++
			fmt.Fprintf(out, "moved %d/%d: %s %s\n", moved, total, aws.ToString(m.MessageId), truncate(aws.ToString(m.Body)))
		}
	}
	left, err := visible(ctx, c, q.DLQURL)
	if err != nil {
		return moved, err
	}
	fmt.Fprintf(out, "done: moved %d of %d messages from %s to %s; the DLQ now holds %d\n", moved, total, q.DLQURL, q.SourceURL, left)
	return moved, nil
}

// moveOne sends m to the source queue, then deletes it from the DLQ.
func moveOne(ctx context.Context, c SQS, q Queues, m types.Message) error {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(q.SourceURL), MessageBody: m.Body}
	if len(m.MessageAttributes) > 0 {
		in.MessageAttributes = make(map[string]types.MessageAttributeValue, len(m.MessageAttributes))
		for k, v := range m.MessageAttributes {
			in.MessageAttributes[k] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
	}
	if _, err := c.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("send message %s to %s (it stays in the DLQ): %w", aws.ToString(m.MessageId), q.SourceURL, err)
	}
	// Sent: delete it even if ctx has just ended, so that a Ctrl-C between the two leaves no copy.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := c.DeleteMessage(dctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.DLQURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
		return fmt.Errorf("message %s was sent to %s but not deleted from the DLQ (a next redrive sends it again): %w", aws.ToString(m.MessageId), q.SourceURL, err)
	}
	return nil
}

func summary(moved, total int, err error) error {
	return fmt.Errorf("moved %d of %d messages, then: %w", moved, total, err)
}

// release makes msgs visible again in the queue at url, at once rather than after their visibility
// timeout. Best effort, and on a context of its own: the caller's may be what ended.
func release(c SQS, url string, msgs []types.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range msgs {
		_, _ = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
		})
	}
}

// peekVisibility is how long a message the dry run has listed stays invisible, so that the next
// receive gives the next messages; the dry run makes them all visible again when it ends.
const peekVisibility = 30

// Peek lists the messages of the DLQ (ids and bodies, truncated) without moving or deleting any, and
// returns how many it listed. It receives them with a short visibility timeout and makes them visible
// again at the end. It also returns the bodies of the first sample messages it listed, whole.
func Peek(ctx context.Context, c SQS, q Queues, sample int, out io.Writer) (n int, bodies []string, err error) {
	n, bodies, _, err = PeekAtMost(ctx, c, q, sample, 0, out)
	return n, bodies, err
}

// PeekAtMost is Peek that stops once it has listed limit messages (0: no limit), saying whether it
// stopped there (more: the DLQ may hold others), so that a dry run asked from a page holds at most
// limit messages invisible, for as long as it takes to list them.
func PeekAtMost(ctx context.Context, c SQS, q Queues, sample, limit int, out io.Writer) (n int, bodies []string, more bool, err error) {
	if err := CheckSources(ctx, c, q); err != nil {
		return 0, nil, false, err
	}
	var held []types.Message
	defer func() { release(c, q.DLQURL, held) }()
	seen := map[string]bool{}
	for {
		batch := int32(10)
		if limit > 0 {
			batch = int32(min(10, limit-len(seen)))
		}
		res, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(q.DLQURL), MaxNumberOfMessages: batch, VisibilityTimeout: peekVisibility,
		})
		if err != nil {
			return len(seen), bodies, false, fmt.Errorf("receive from the DLQ: %w", err)
		}
		if len(res.Messages) == 0 {
			break
		}
		again := false
		for _, m := range res.Messages {
			held = append(held, m)
			id := aws.ToString(m.MessageId)
			if seen[id] { // visible again: a listing longer than peekVisibility; it has them all
				again = true
				continue
			}
			seen[id] = true
			if len(bodies) < sample {
				bodies = append(bodies, aws.ToString(m.Body))
			}
			fmt.Fprintf(out, "would move %s %s\n", id, truncate(aws.ToString(m.Body)))
		}
		if again {
			break
		}
		if limit > 0 && len(seen) >= limit {
			more = true
			break
		}
	}
	fmt.Fprintf(out, "dry run: %d messages would move from %s to %s; nothing was moved or deleted\n", len(seen), q.DLQURL, q.SourceURL)
	return len(seen), bodies, more, nil
}

// truncate quotes a body, cut to 120 bytes.
func truncate(body string) string {
	const limit = 120
	if len(body) > limit {
		return strconv.Quote(strings.ToValidUTF8(body[:limit], "")) + fmt.Sprintf("... (%d bytes)", len(body))
	}
	return strconv.Quote(body)
}
