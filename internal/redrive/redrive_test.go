package redrive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/stretchr/testify/require"
)

// dlqBodies are what the tests put in a DLQ: poison (what the processor fails every time) and
// normal messages (which failed for a cause since fixed).
var dlqBodies = []string{`not json`, `{"id":1}`, `{"id":-4}`, `{"id":2}`, strings.Repeat("x", 300), `{"ids":[3,4]}`}

// setup creates a source queue and its DLQ, puts dlqBodies in the DLQ (the first with a message
// attribute), and returns the queues as resolve finds them from the source queue's name.
func setup(t *testing.T) (*sqs.Client, Queues) {
	t.Helper()
	ctx := context.Background()
	client := localsqs.Client(t)
	qs := localsqs.Queues(t, client, 30, 5)
	for i, body := range dlqBodies {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(qs.DLQURL), MessageBody: aws.String(body)}
		if i == 0 {
			in.MessageAttributes = map[string]types.MessageAttributeValue{"origin": {DataType: aws.String("String"), StringValue: aws.String("test")}}
		}
		_, err := client.SendMessage(ctx, in)
		require.NoError(t, err)
	}
	name := qs.URL[strings.LastIndex(qs.URL, "/")+1:]
	q, err := Resolve(ctx, client, name, "")
	require.NoError(t, err)
	require.Equal(t, Queues{SourceURL: qs.URL, SourceARN: qs.ARN, DLQURL: qs.DLQURL, DLQARN: qs.DLQARN}, q,
		"the DLQ is the one the source queue's RedrivePolicy names")
	return client, q
}

// drain receives every message of the queue at url (and deletes none), and returns them sorted by body.
func drain(t *testing.T, client *sqs.Client, url string) []types.Message {
	t.Helper()
	var all []types.Message
	for {
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MaxNumberOfMessages: 10, VisibilityTimeout: 30, MessageAttributeNames: []string{"All"}})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			sort.Slice(all, func(i, j int) bool { return *all[i].Body < *all[j].Body })
			return all
		}
		all = append(all, out.Messages...)
	}
}

func bodies(msgs []types.Message) []string {
	b := make([]string, len(msgs))
	for i, m := range msgs {
		b[i] = aws.ToString(m.Body)
	}
	return b
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

func depth(t *testing.T, client *sqs.Client, url string) int {
	t.Helper()
	v, inFlight, err := queue.Depth(context.Background(), client, url)
	require.NoError(t, err)
	return v + inFlight
}

// A dry run lists every message of the DLQ, moves none, deletes none, and leaves them all visible:
// received at once afterwards.
func TestDryRunListsAndLeavesEverything(t *testing.T) {
	t.Parallel()
	client, q := setup(t)
	var out bytes.Buffer
	n, sample, err := Peek(context.Background(), client, q, 4, &out)
	require.NoError(t, err)
	require.Equal(t, len(dlqBodies), n)
	require.Len(t, sample, 4, "the first 4 bodies, whole")
	for _, b := range sample {
		require.Contains(t, dlqBodies, b)
	}
	require.Contains(t, out.String(), `"not json"`)
	require.Contains(t, out.String(), `"{\"ids\":[3,4]}"`)
	require.Contains(t, out.String(), `... (300 bytes)`, "a long body is cut")
	require.Contains(t, out.String(), "nothing was moved or deleted")

	require.Zero(t, depth(t, client, q.SourceURL), "nothing moved")
	require.Equal(t, sorted(dlqBodies), bodies(drain(t, client, q.DLQURL)), "every message still there, and visible")
}

// A dry run with a limit stops once it has listed that many, says the DLQ may hold more, and
// leaves every message where it was and visible.
func TestDryRunStopsAtItsLimit(t *testing.T) {
	t.Parallel()
	client, q := setup(t)
	n, _, more, err := PeekAtMost(context.Background(), client, q, 1, len(dlqBodies)+5, io.Discard)
	require.NoError(t, err)
	require.False(t, more, "under its limit it lists the whole DLQ")
	require.Equal(t, len(dlqBodies), n)

	n, _, more, err = PeekAtMost(context.Background(), client, q, 1, 1, io.Discard)
	require.NoError(t, err)
	require.True(t, more, "it stopped at its limit")
	require.Equal(t, 1, n, "it listed no more than its limit")
	require.Zero(t, depth(t, client, q.SourceURL), "nothing moved")
	require.Equal(t, sorted(dlqBodies), bodies(drain(t, client, q.DLQURL)), "every message still there, and visible")
}

// On goaws, which lacks StartMessageMoveTask, a redrive moves the messages one by one: the source
// queue then holds exactly the DLQ's bodies, once each, with their attributes, and the DLQ is empty.
func TestRedriveMovesEveryMessageOnce(t *testing.T) {
	t.Parallel()
	client, q := setup(t)
	var out bytes.Buffer
	moved, err := Redrive(context.Background(), client, q, time.Second, &out)
	require.NoError(t, err)
	require.Equal(t, len(dlqBodies), moved)
	require.Contains(t, out.String(), `the endpoint lacks StartMessageMoveTask (no message move tasks: HTTP 400 "Bad Request")`)
	require.Contains(t, out.String(), "moved 6 of 6 messages")
	require.Contains(t, out.String(), "the DLQ now holds 0")

	msgs := drain(t, client, q.SourceURL)
	require.Equal(t, sorted(dlqBodies), bodies(msgs), "each body once")
	for _, m := range msgs {
		want := map[bool]string{true: "test", false: ""}[*m.Body == dlqBodies[0]]
		require.Equal(t, want, aws.ToString(m.MessageAttributes["origin"].StringValue), "attributes kept: %s", *m.Body)
	}
	require.Zero(t, depth(t, client, q.DLQURL), "the DLQ is empty")
}

// A source queue that does not exist: the first send fails, nothing is deleted, and the messages
// are visible in the DLQ again at once.
func TestSendFailureDeletesNothing(t *testing.T) {
	t.Parallel()
	client, q := setup(t)
	q.SourceURL += "-missing"
	moved, err := MoveOneByOne(context.Background(), client, q, &bytes.Buffer{})
	require.ErrorContains(t, err, "moved 0 of 6 messages")
	require.ErrorContains(t, err, "it stays in the DLQ")
	require.Zero(t, moved)
	require.Equal(t, sorted(dlqBodies), bodies(drain(t, client, q.DLQURL)))
}

// failingSends is an SQS whose n-th SendMessage fails: with an error of its own, or by cancelling
// the context first (a Ctrl-C); or which cancels the context right after the n-th send succeeded
// (a Ctrl-C between a send and its delete).
type failingSends struct {
	SQS
	n, calls int
	cancel   context.CancelFunc // nil: fail with an error
	after    bool               // cancel after the send
}

func (f *failingSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	f.calls++
	if f.calls == f.n {
		switch {
		case f.cancel == nil:
			return nil, errors.New("send failed on purpose")
		case f.after:
			defer f.cancel()
		default:
			f.cancel()
		}
	}
	return f.SQS.SendMessage(ctx, in, opts...)
}

// A send that fails mid-way, by an error or a cancelled context: what was sent is in the source queue
// and gone from the DLQ; everything else is still in the DLQ, visible, and nowhere else. A context
// cancelled between a send and its delete still lets the delete happen.
func TestFailureMidwayDeletesOnlyWhatWasSent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name             string
		cancelled, after bool
		moved            int
	}{{"error", false, false, 2}, {"cancelled", true, false, 2}, {"cancelled after a send", true, true, 3}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			client, q := setup(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := &failingSends{SQS: client, n: 3, after: c.after}
			if c.cancelled {
				f.cancel = cancel
			}
			moved, err := MoveOneByOne(ctx, f, q, &bytes.Buffer{})
			require.ErrorContains(t, err, fmt.Sprintf("moved %d of 6 messages", c.moved))
			require.Equal(t, c.moved, moved)

			sent, left := bodies(drain(t, client, q.SourceURL)), bodies(drain(t, client, q.DLQURL))
			require.Len(t, sent, c.moved)
			require.Len(t, left, 6-c.moved)
			require.Equal(t, sorted(dlqBodies), sorted(append(sent, left...)), "each message in exactly one queue")
		})
	}
}

// Only an answer that the action is unknown makes the redrive fall back to moving one by one:
// goaws's bare 400 "Bad Request", or AWS's error codes for an unknown action. Any other failure,
// a queue that does not exist say, is an error. Against a server answering as each would.
func TestOnlyAnUnknownActionFallsBack(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, contentType, body string
		status                  int
		unknown                 bool
	}{
		{"goaws", "text/plain", "Bad Request", 400, true},
		{"json unknown operation", "application/x-amz-json-1.0", `{"__type":"com.amazon.coral.service#UnknownOperationException"}`, 400, true},
		{"invalid action", "application/x-amz-json-1.0", `{"__type":"InvalidAction","message":"no such action"}`, 400, true},
		{"no such queue", "application/x-amz-json-1.0", `{"__type":"com.amazonaws.sqs#ResourceNotFoundException","message":"no queue"}`, 400, false},
		{"access denied", "application/x-amz-json-1.0", `{"__type":"AccessDeniedException","message":"not allowed"}`, 403, false},
		{"other plain 400", "text/plain", "Bad Request: queue is FIFO", 400, false},
		{"plain 500", "text/plain", "Bad Request", 500, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", c.contentType)
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			t.Cleanup(srv.Close)
			client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
				Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), Retryer: aws.NopRetryer{}})
			_, err := StartMoveTask(context.Background(), client, Queues{DLQARN: "arn:aws:sqs:us-east-1:1:q-dlq", SourceARN: "arn:aws:sqs:us-east-1:1:q"})
			require.Error(t, err)
			require.Equal(t, c.unknown, errors.Is(err, ErrNoMoveTasks), "%v", err)
		})
	}
}

// fakeMover plays AWS's message move tasks: StartMessageMoveTask records its input, and
// ListMessageMoveTasks answers each of lists in turn (the last one again after that). goaws lacks
// these actions, so the progress loop is tested against this fake; the real client's calls are the
// two one-liners of startMoveTask and awaitMoveTask.
type fakeMover struct {
	started *sqs.StartMessageMoveTaskInput
	lists   [][]types.ListMessageMoveTasksResultEntry
	listErr error
	calls   int
}

func (f *fakeMover) StartMessageMoveTask(_ context.Context, in *sqs.StartMessageMoveTaskInput, _ ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error) {
	f.started = in
	return &sqs.StartMessageMoveTaskOutput{TaskHandle: aws.String("handle-1")}, nil
}

func (f *fakeMover) ListMessageMoveTasks(_ context.Context, in *sqs.ListMessageMoveTasksInput, _ ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	i := min(f.calls, len(f.lists)-1)
	f.calls++
	return &sqs.ListMessageMoveTasksOutput{Results: f.lists[i]}, nil
}

func task(handle, status string, moved int64, total *int64) types.ListMessageMoveTasksResultEntry {
	e := types.ListMessageMoveTasksResultEntry{Status: aws.String(status), ApproximateNumberOfMessagesMoved: moved, ApproximateNumberOfMessagesToMove: total}
	if handle != "" {
		e.TaskHandle = aws.String(handle)
	}
	return e
}

// The move task starts from the DLQ to the source queue, and its progress is reported as it changes
// until it completes; a completed task has lost its handle (AWS lists handles of running tasks only),
// and an older task listed after it is not taken for it.
func TestMoveTaskProgressUntilCompleted(t *testing.T) {
	t.Parallel()
	q := Queues{SourceARN: "arn:aws:sqs:eu-west-1:1:app-events", DLQARN: "arn:aws:sqs:eu-west-1:1:app-events-dlq"}
	f := &fakeMover{lists: [][]types.ListMessageMoveTasksResultEntry{
		{task("handle-1", "RUNNING", 0, nil), task("", "FAILED", 3, aws.Int64(9))},
		{task("handle-1", "RUNNING", 40, aws.Int64(100)), task("", "FAILED", 3, aws.Int64(9))},
		{task("handle-1", "RUNNING", 40, aws.Int64(100))},
		{task("", "COMPLETED", 100, aws.Int64(100)), task("", "FAILED", 3, aws.Int64(9))},
	}}
	handle, err := StartMoveTask(context.Background(), f, q)
	require.NoError(t, err)
	require.Equal(t, "handle-1", handle)
	require.Equal(t, q.DLQARN, aws.ToString(f.started.SourceArn), "from the DLQ")
	require.Equal(t, q.SourceARN, aws.ToString(f.started.DestinationArn), "to its source queue")

	var out bytes.Buffer
	moved, err := AwaitMoveTask(context.Background(), f, q.DLQARN, handle, time.Millisecond, &out)
	require.NoError(t, err)
	require.Equal(t, 100, moved)
	require.Equal(t, "move task RUNNING: moved 0 / ?\nmove task RUNNING: moved 40 / 100\nmove task COMPLETED: moved 100 / 100\n"+
		"done: moved 100 messages from arn:aws:sqs:eu-west-1:1:app-events-dlq to their source queue\n", out.String(),
		"one line per change")
	require.Equal(t, 4, f.calls)
}

// A task that fails or is cancelled is an error naming why; so is a listing that fails, and a
// context that ends while the task runs (which says how to stop the task).
func TestMoveTaskFailures(t *testing.T) {
	t.Parallel()
	failed := &fakeMover{lists: [][]types.ListMessageMoveTasksResultEntry{
		{task("handle-1", "RUNNING", 1, aws.Int64(5))},
		{task("", "FAILED", 2, aws.Int64(5))},
	}}
	failed.lists[1][0].FailureReason = aws.String("AccessDenied: kms:Decrypt")
	moved, err := AwaitMoveTask(context.Background(), failed, "dlq", "handle-1", time.Millisecond, &bytes.Buffer{})
	require.Equal(t, 2, moved)
	require.ErrorContains(t, err, "message move task failed after moving 2 messages: AccessDenied: kms:Decrypt")

	cancelled := &fakeMover{lists: [][]types.ListMessageMoveTasksResultEntry{{task("", "CANCELLED", 2, aws.Int64(5))}}}
	_, err = AwaitMoveTask(context.Background(), cancelled, "dlq", "handle-1", time.Millisecond, &bytes.Buffer{})
	require.ErrorContains(t, err, "message move task cancelled")

	listing := &fakeMover{listErr: errors.New("throttled")}
	_, err = AwaitMoveTask(context.Background(), listing, "dlq", "handle-1", time.Millisecond, &bytes.Buffer{})
	require.ErrorContains(t, err, "throttled")

	none := &fakeMover{lists: [][]types.ListMessageMoveTasksResultEntry{{}}}
	_, err = AwaitMoveTask(context.Background(), none, "dlq", "handle-1", time.Millisecond, &bytes.Buffer{})
	require.ErrorContains(t, err, "lists no task")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	running := &fakeMover{lists: [][]types.ListMessageMoveTasksResultEntry{{task("handle-1", "RUNNING", 1, aws.Int64(5))}}}
	_, err = AwaitMoveTask(ctx, running, "dlq", "handle-1", time.Millisecond, &bytes.Buffer{})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "cancel-message-move-task --task-handle handle-1")
}

// A progress interval of 0 or less would list the move tasks without pause until the task ends (a
// busy loop of ListMessageMoveTasks calls): refused before any task is listed, and by Redrive before
// any task starts or any message moves.
func TestProgressIntervalMustBePositive(t *testing.T) {
	t.Parallel()
	for _, every := range []time.Duration{0, -time.Second} {
		f := &fakeMover{lists: [][]types.ListMessageMoveTasksResultEntry{
			{task("handle-1", "RUNNING", 0, aws.Int64(5))},
			{task("", "COMPLETED", 5, aws.Int64(5))},
		}}
		_, err := AwaitMoveTask(context.Background(), f, "dlq", "handle-1", every, io.Discard)
		require.ErrorContains(t, err, "progress interval "+every.String()+" ")
		require.Zero(t, f.calls, "nothing listed")
	}

	client, q := setup(t)
	var out bytes.Buffer
	moved, err := Redrive(context.Background(), client, q, 0, &out)
	require.ErrorContains(t, err, "progress interval 0s ")
	require.Zero(t, moved)
	require.Empty(t, out.String())
	require.Zero(t, depth(t, client, q.SourceURL), "nothing moved")
	require.Equal(t, len(dlqBodies), depth(t, client, q.DLQURL))
}

// sharedDLQ creates a second source queue whose RedrivePolicy names q's DLQ too (SQS allows it),
// deleted when the test ends, and returns its URL.
func sharedDLQ(t *testing.T, client *sqs.Client, q Queues) string {
	t.Helper()
	ctx := context.Background()
	policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":5}`, q.DLQARN)
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(q.SourceURL[strings.LastIndex(q.SourceURL, "/")+1:] + "-also"),
		Attributes: map[string]string{"RedrivePolicy": policy},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}) })
	return aws.ToString(out.QueueUrl)
}

// deletingLister is an SQS whose ListQueues deletes a queue right after listing it: a queue deleted
// while the sources are scanned (as the tests sharing one goaws do all the time).
type deletingLister struct {
	SQS
	victim string
}

func (d *deletingLister) ListQueues(ctx context.Context, in *sqs.ListQueuesInput, opts ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error) {
	out, err := d.SQS.ListQueues(ctx, in, opts...)
	if err == nil {
		_, err = d.SQS.(*sqs.Client).DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(d.victim)})
	}
	return out, err
}

// failingAttributes is an SQS whose GetQueueAttributes of url fails.
type failingAttributes struct {
	SQS
	url string
}

func (f *failingAttributes) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if aws.ToString(in.QueueUrl) == f.url {
		return nil, errors.New("attributes failed on purpose")
	}
	return f.SQS.GetQueueAttributes(ctx, in, opts...)
}

// sourcesServer answers ListDeadLetterSourceQueues as AWS's JSON protocol does (its members spelled
// as the SDK's model spells them: queueUrls, NextToken), one page per request: pages[i] is the page
// asked with NextToken "p<i>" ("" for the first), with the next page's token while there is one. It
// returns the server's URL and a count of the calls made.
func sourcesServer(t *testing.T, pages [][]string) (string, func() int) {
	t.Helper()
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ NextToken string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		mu.Lock()
		calls++
		mu.Unlock()
		i := 0
		if in.NextToken != "" {
			i, _ = strconv.Atoi(strings.TrimPrefix(in.NextToken, "p"))
		}
		out := map[string]any{"queueUrls": pages[i]}
		if i+1 < len(pages) {
			out["NextToken"] = fmt.Sprintf("p%d", i+1)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() int { mu.Lock(); defer mu.Unlock(); return calls }
}
