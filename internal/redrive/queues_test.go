package redrive

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/stretchr/testify/require"
)

// The DLQ is the one the source queue's RedrivePolicy names. DLQ= may name it (by name or URL);
// naming another queue's DLQ, or any queue as the DLQ of a queue without a RedrivePolicy, is refused,
// naming the problem, before anything is read from either queue's messages.
func TestResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := localsqs.Client(t)
	qs := localsqs.Queues(t, client, 30, 5)
	other := localsqs.Queues(t, client, 30, 5)
	want := Queues{SourceURL: qs.URL, SourceARN: qs.ARN, DLQURL: qs.DLQURL, DLQARN: qs.DLQARN}
	dlqName := qs.DLQURL[strings.LastIndex(qs.DLQURL, "/")+1:]
	for _, dlq := range []string{"", qs.DLQURL, dlqName} {
		q, err := Resolve(ctx, client, qs.URL, dlq)
		require.NoError(t, err, "DLQ=%q", dlq)
		require.Equal(t, want, q, "DLQ=%q", dlq)
	}

	// Another queue's DLQ: its messages would land in the wrong queue.
	_, err := Resolve(ctx, client, qs.URL, other.DLQURL)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, other.DLQARN+" is not the dead-letter queue of "+qs.URL)
	require.ErrorContains(t, err, "its RedrivePolicy names "+qs.DLQARN)
	// A queue that is no DLQ at all (the other source queue) is refused the same way.
	_, err = Resolve(ctx, client, qs.URL, other.URL)
	require.ErrorIs(t, err, ErrRefused)
	// A queue without a RedrivePolicy (a DLQ has none of its own) has no DLQ to redrive, named or not.
	_, err = Resolve(ctx, client, qs.DLQURL, "")
	require.ErrorContains(t, err, "has no RedrivePolicy")
	_, err = Resolve(ctx, client, qs.DLQURL, other.DLQURL)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "has no RedrivePolicy")
	_, err = Resolve(ctx, client, "no-such-queue-"+t.Name(), "")
	require.ErrorContains(t, err, "no-such-queue")
	_, err = Resolve(ctx, client, qs.URL, qs.URL)
	require.ErrorIs(t, err, ErrRefused, "the source queue is not its own DLQ")
}

// A DLQ that is the dead-letter queue of another queue too holds that queue's messages: a redrive
// and a dry run are refused, naming the other queue, and nothing moves. On goaws, which lacks
// ListDeadLetterSourceQueues, the sources are found from the queues' RedrivePolicies.
func TestSharedDLQIsRefused(t *testing.T) {
	t.Parallel()
	client, q := setup(t)
	also := sharedDLQ(t, client, q)

	var out bytes.Buffer
	moved, err := Redrive(context.Background(), client, q, time.Second, &out)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, q.DLQARN+" is also the dead-letter queue of "+also+":")
	require.ErrorContains(t, err, "start-message-move-task --source-arn "+q.DLQARN)
	require.Zero(t, moved)
	require.Empty(t, out.String())

	_, _, err = Peek(context.Background(), client, q, 1, &out)
	require.ErrorIs(t, err, ErrRefused)
	require.Empty(t, out.String(), "nothing listed")

	require.Zero(t, depth(t, client, q.SourceURL), "nothing moved")
	require.Zero(t, depth(t, client, also), "nothing moved")
	require.Equal(t, sorted(dlqBodies), bodies(drain(t, client, q.DLQURL)), "every message still there, and visible")
}

// A queue listed then deleted before its RedrivePolicy is read is no source: the scan goes on. A
// queue whose attributes cannot be read for another reason stops it (a source could be missed).
func TestSourceScanSkipsDeletedQueues(t *testing.T) {
	t.Parallel()
	client, q := setup(t)
	victim := localsqs.Queues(t, client, 30, 5)
	require.NoError(t, CheckSources(context.Background(), &deletingLister{SQS: client, victim: victim.URL}, q))

	also := sharedDLQ(t, client, q)
	err := CheckSources(context.Background(), &deletingLister{SQS: client, victim: victim.DLQURL}, q)
	require.ErrorIs(t, err, ErrRefused, "the other source is still found")
	require.ErrorContains(t, err, also)

	failing := &failingAttributes{SQS: client, url: also}
	err = CheckSources(context.Background(), failing, q)
	require.ErrorContains(t, err, "attributes failed on purpose")
	require.NotErrorIs(t, err, ErrRefused)
}

// On AWS the sources come from ListDeadLetterSourceQueues of the DLQ, asked of a server answering as
// AWS's JSON protocol does (goaws lacks the action): the source queue alone, under any host, passes;
// another source is refused by name; a failing call is an error, not a reason to scan ListQueues.
func TestSourcesFromListDeadLetterSourceQueues(t *testing.T) {
	t.Parallel()
	q := Queues{SourceURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/app-events", SourceARN: "arn:aws:sqs:eu-west-1:123456789012:app-events",
		DLQURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/app-events-dlq", DLQARN: "arn:aws:sqs:eu-west-1:123456789012:app-events-dlq"}
	for _, c := range []struct {
		name, body string
		status     int
		refused    string // the other queue named; "" when it passes
		err        string
	}{
		{"ours alone", `{"queueUrls":["https://sqs.eu-west-1.amazonaws.com/123456789012/app-events"]}`, 200, "", ""},
		{"ours on the legacy host", `{"queueUrls":["https://eu-west-1.queue.amazonaws.com/123456789012/app-events"]}`, 200, "", ""},
		{"none listed", `{"queueUrls":[]}`, 200, "", ""},
		{"another too", `{"queueUrls":["https://sqs.eu-west-1.amazonaws.com/123456789012/app-events","https://sqs.eu-west-1.amazonaws.com/123456789012/billing"]}`, 200,
			"https://sqs.eu-west-1.amazonaws.com/123456789012/billing", ""},
		{"same name, other account", `{"queueUrls":["https://sqs.eu-west-1.amazonaws.com/999999999999/app-events"]}`, 200,
			"https://sqs.eu-west-1.amazonaws.com/999999999999/app-events", ""},
		{"access denied", `{"__type":"AccessDeniedException","message":"not allowed"}`, 403, "", "not allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var target, queueURL string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				target = r.Header.Get("X-Amz-Target")
				var in struct{ QueueUrl string }
				_ = json.NewDecoder(r.Body).Decode(&in)
				queueURL = in.QueueUrl
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			t.Cleanup(srv.Close)
			client := sqs.New(sqs.Options{Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL),
				Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), Retryer: aws.NopRetryer{}})
			err := CheckSources(context.Background(), client, q)
			require.Equal(t, "AmazonSQS.ListDeadLetterSourceQueues", target, "the last call")
			require.Equal(t, q.DLQURL, queueURL, "asked of the DLQ")
			switch {
			case c.refused != "":
				require.ErrorIs(t, err, ErrRefused)
				require.ErrorContains(t, err, "also the dead-letter queue of "+c.refused+":")
			case c.err != "":
				require.ErrorContains(t, err, c.err)
				require.NotErrorIs(t, err, ErrRefused)
			default:
				require.NoError(t, err)
			}
		})
	}
}

// A page of ListDeadLetterSourceQueues may hold fewer queues than asked for and still have a next
// page (SQS promises no full pages): another source on a later page is found and refused, not
// taken for "the source queue alone" because the first page listed only it.
func TestSourcesOnALaterPageAreFound(t *testing.T) {
	t.Parallel()
	q := Queues{SourceURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/app-events", SourceARN: "arn:aws:sqs:eu-west-1:123456789012:app-events",
		DLQURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/app-events-dlq", DLQARN: "arn:aws:sqs:eu-west-1:123456789012:app-events-dlq"}
	endpoint, calls := sourcesServer(t, [][]string{
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/app-events"},
		{},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/billing"},
	})
	client := sqs.New(sqs.Options{Region: "eu-west-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), Retryer: aws.NopRetryer{}})
	err := CheckSources(context.Background(), client, q)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "also the dead-letter queue of https://sqs.eu-west-1.amazonaws.com/123456789012/billing:")
	require.Equal(t, 3, calls(), "every page read")

	// The source queue alone, over pages: it passes, once the last page is read.
	endpoint, calls = sourcesServer(t, [][]string{{"https://sqs.eu-west-1.amazonaws.com/123456789012/app-events"}, {}})
	client = sqs.New(sqs.Options{Region: "eu-west-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), Retryer: aws.NopRetryer{}})
	require.NoError(t, CheckSources(context.Background(), client, q))
	require.Equal(t, 2, calls())
}

// An endpoint whose queue URLs carry no account (ElasticMQ's and older goaws's
// http://host/queue/<name>) lists the source queue under the URL it gave for it: that is the source
// queue, not another one, whatever its URL's path looks like.
func TestSourceQueueUnderItsOwnURLIsNoOtherSource(t *testing.T) {
	t.Parallel()
	q := Queues{SourceURL: "http://127.0.0.1:9324/queue/app-events", SourceARN: "arn:aws:sqs:elasticmq:000000000000:app-events",
		DLQURL: "http://127.0.0.1:9324/queue/app-events-dlq", DLQARN: "arn:aws:sqs:elasticmq:000000000000:app-events-dlq"}
	endpoint, _ := sourcesServer(t, [][]string{{q.SourceURL}})
	client := sqs.New(sqs.Options{Region: "elasticmq", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), Retryer: aws.NopRetryer{}})
	require.NoError(t, CheckSources(context.Background(), client, q))

	endpoint, _ = sourcesServer(t, [][]string{{q.SourceURL, "http://127.0.0.1:9324/queue/billing"}})
	client = sqs.New(sqs.Options{Region: "elasticmq", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), Retryer: aws.NopRetryer{}})
	err := CheckSources(context.Background(), client, q)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "also the dead-letter queue of http://127.0.0.1:9324/queue/billing:")
}
