package main

import (
	"bytes"
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/stretchr/testify/require"
)

// The command as `make redrive QUEUE=... LOCAL=1` runs it, against the test's local SQS endpoint
// (SQSLOCAL_PORT names its port): a dry run lists and moves nothing, then a redrive moves every
// message. The work itself is internal/redrive's, tested there.
func TestRunDryRunThenRedrive(t *testing.T) {
	ctx := context.Background()
	client := localEndpoint(t)
	qs := localsqs.Queues(t, client, 30, 5)
	for _, body := range []string{`{"id":1}`, `{"id":2}`} {
		_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(qs.DLQURL), MessageBody: aws.String(body)})
		require.NoError(t, err)
	}

	var out bytes.Buffer
	require.NoError(t, run(ctx, qs.URL, "", true, true, time.Second, &out))
	require.Contains(t, out.String(), "(LOCAL)")
	require.Contains(t, out.String(), `would move`)
	require.Contains(t, out.String(), "dry run: 2 messages would move")
	requireDepth(t, client, qs.URL, 0)

	out.Reset()
	require.NoError(t, run(ctx, qs.URL, "", false, true, time.Second, &out))
	require.Contains(t, out.String(), "moved 2 of 2 messages")
	requireDepth(t, client, qs.URL, 2)
	requireDepth(t, client, qs.DLQURL, 0)
}

// localEndpoint points LOCAL=1 at the test's local SQS endpoint (SQSLOCAL_PORT, its port on
// 127.0.0.1) and returns a client of it; it skips where the endpoint is not on 127.0.0.1.
func localEndpoint(t *testing.T) *sqs.Client {
	t.Helper()
	endpoint, err := url.Parse(localsqs.Endpoint(t))
	require.NoError(t, err)
	if endpoint.Hostname() != "127.0.0.1" {
		t.Skipf("LOCAL=1 means 127.0.0.1; the test endpoint is %s", endpoint)
	}
	t.Setenv("SQSLOCAL_PORT", endpoint.Port())
	return localsqs.Client(t)
}

func requireDepth(t *testing.T, client *sqs.Client, url string, want int) {
	t.Helper()
	v, inFlight, err := queue.Depth(context.Background(), client, url)
	require.NoError(t, err)
	require.Equal(t, want, v+inFlight, url)
}

func TestEnvBool(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "1": true, "true": true, "yes": true} {
		t.Setenv("X_TEST_BOOL", v)
		require.Equal(t, want, envBool("X_TEST_BOOL"), "%q", v)
	}
}

// DLQ= naming another queue's DLQ is refused before anything moves: the messages stay in that DLQ
// and none reaches the queue named by QUEUE, in a dry run and in a redrive.
func TestRunRefusesAnotherQueuesDLQ(t *testing.T) {
	ctx := context.Background()
	client := localEndpoint(t)
	qs := localsqs.Queues(t, client, 30, 5)
	other := localsqs.Queues(t, client, 30, 5)
	_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(other.DLQURL), MessageBody: aws.String(`{"id":7}`)})
	require.NoError(t, err)

	for _, dryRun := range []bool{true, false} {
		var out bytes.Buffer
		err := run(ctx, qs.URL, other.DLQURL, dryRun, true, time.Second, &out)
		require.ErrorContains(t, err, "is not the dead-letter queue of "+qs.URL, "dry run %v", dryRun)
		require.NotContains(t, out.String(), "would move")
		require.NotContains(t, out.String(), "moved")
		requireDepth(t, client, qs.URL, 0)
		requireDepth(t, client, other.DLQURL, 1)
		requireDepth(t, client, other.URL, 0)
	}
}

// -every is how often a move task's progress is read (a ListMessageMoveTasks call): 0 or less would
// call it without pause until the task ends, so it is refused, before anything is read or moved.
func TestRunRefusesEveryBelowOneSecond(t *testing.T) {
	ctx := context.Background()
	client := localEndpoint(t)
	qs := localsqs.Queues(t, client, 30, 5)
	_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(qs.DLQURL), MessageBody: aws.String(`{"id":7}`)})
	require.NoError(t, err)
	for _, every := range []time.Duration{0, -time.Second, 999 * time.Millisecond} {
		var out bytes.Buffer
		err := run(ctx, qs.URL, "", false, true, every, &out)
		require.ErrorContains(t, err, "-every "+every.String()+": ", "every %v", every)
		require.ErrorContains(t, err, "at least 1s")
		require.Empty(t, out.String(), "refused before connecting")
		requireDepth(t, client, qs.DLQURL, 1)
		requireDepth(t, client, qs.URL, 0)
	}
}

// DRY_RUN and LOCAL set to nothing are refused before anything is read or moved, as every
// true/false of the system's configuration is: `make redrive QUEUE=events LOCAL=1 DRY_RUN=` (a dry
// run meant, its value left out) read DRY_RUN as no and moved every message of the DLQ.
func TestAFlagSetToNothingIsRefused(t *testing.T) {
	env := map[string]string{"DRY_RUN": "", "LOCAL": " "}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	err := setButEmpty(lookup)
	require.ErrorContains(t, err, "DRY_RUN is set but empty")
	require.ErrorContains(t, err, "LOCAL is set but empty")
	env = map[string]string{"DRY_RUN": "1"}
	require.NoError(t, setButEmpty(lookup), "set to something, or unset")
}
