package queue

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// A retried SQS call is logged with its operation and the cause of the failed attempt.
func TestSQSRetryerLogsWhyItRetries(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, `{"__type":"InternalError","message":"queue service unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{"QueueUrls":[]}`))
	}))
	t.Cleanup(srv.Close)
	var logs bytes.Buffer
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
		Retryer:     Retryer(slog.New(slog.NewTextHandler(&logs, nil)))})
	_, err := client.ListQueues(context.Background(), &sqs.ListQueuesInput{})
	require.NoError(t, err, "the second attempt succeeds")
	require.Equal(t, int32(2), calls.Load())
	require.Contains(t, logs.String(), "retrying")
	require.Contains(t, logs.String(), "operation=ListQueues")
	require.Contains(t, logs.String(), "StatusCode: 503")
	require.Equal(t, 1, strings.Count(logs.String(), "retrying"), "one line per retried attempt")
}

// doerFunc is an HTTP client made of a function.
type doerFunc func(*http.Request) (*http.Response, error)

func (f doerFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// lateProbe plays the race behind the SDK's "use of closed network connection" retries: the SDK
// closes the request body once the response is back, and then net/http's write loop makes its last
// read of the body (io.Copy(io.Discard, body)) to check nothing is left. It returns that read's
// error, and a response to ListQueues.
func lateProbe(probeErr *error) doerFunc {
	return func(r *http.Request) (*http.Response, error) {
		if r.Body == nil {
			return nil, errors.New("ListQueues should have a body")
		}
		if err := r.Body.Close(); err != nil {
			return nil, err
		}
		_, *probeErr = io.Copy(io.Discard, r.Body)
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
			Body: io.NopCloser(strings.NewReader(`{"QueueUrls":[]}`)), Request: r}, nil
	}
}

// With HTTPClient's wrapping, that last read of a body the SDK has closed is a clean end, so the
// transport keeps the connection and the response being read on it.
func TestSQSRequestBodyReadAfterCloseIsNotAnError(t *testing.T) {
	t.Parallel()
	call := func(doer aws.HTTPClient) {
		t.Helper()
		client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://sqs.invalid"),
			Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), HTTPClient: doer,
			Retryer: aws.NopRetryer{}})
		_, err := client.ListQueues(context.Background(), &sqs.ListQueuesInput{})
		require.NoError(t, err)
	}
	var wrapped error
	call(bodyWrapping{lateProbe(&wrapped)})
	require.NoError(t, wrapped, "the transport would take this for a failed write and close the connection")

	// The SDK's own body, unwrapped, is what fails (smithy-go's safe reader's WriteTo returns io.EOF
	// after Close). If this starts failing, the SDK has fixed it, and the wrapping can go.
	var raw error
	call(lateProbe(&raw))
	require.ErrorIs(t, raw, io.EOF, "the SDK's request body no longer fails the transport's last read")
}
