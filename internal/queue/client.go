package queue

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// NewClient returns an SQS client for the AWS configuration (region, credentials, and the
// AWS_ENDPOINT_URL_SQS / AWS_ENDPOINT_URL overrides), with ClientOptions: retried attempts are
// logged to log.
func NewClient(awsCfg aws.Config, log *slog.Logger) *sqs.Client {
	return sqs.NewFromConfig(awsCfg, ClientOptions(log))
}

// ClientOptions gives an SQS client what every SQS client of the project has, the product's, the
// bench's and the tests': HTTPClient, and Retryer logging to log.
func ClientOptions(log *slog.Logger) func(*sqs.Options) {
	return func(o *sqs.Options) {
		o.HTTPClient = HTTPClient()
		o.Retryer = Retryer(log)
	}
}

// IdleConns is how many idle connections to the SQS endpoint a process keeps. The SDK keeps 10
// per host: a process with more concurrent senders and pollers than that (the local runner) opens
// and closes a connection for most calls. Measured against goaws with 16 concurrent senders: about
// 2,600 sends/s with the SDK's default, 4,300 with this (docs/performance.md).
const IdleConns = 64

// HTTPClient is the HTTP client of every SQS client: the SDK's, keeping IdleConns idle connections
// per host, with each request body wrapped by requestBody.
func HTTPClient() aws.HTTPClient {
	return bodyWrapping{awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = max(t.MaxIdleConns, IdleConns)
		t.MaxIdleConnsPerHost = IdleConns
	})}
}

// bodyWrapping hands every request to next with its body wrapped by requestBody.
type bodyWrapping struct{ next aws.HTTPClient }

func (c bodyWrapping) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = requestBody{r.Body}
	}
	return c.next.Do(r)
}

// requestBody is a request body with Read and Close only, hiding the WriteTo of the SDK's body.
//
// Why: net/http's transport, once it has written a body of known length, reads it once more to
// check that nothing is left (io.Copy(io.Discard, body), in its connection's write loop). The SDK
// closes the body as soon as the response headers are back, and its body's WriteTo, called after
// that close, returns io.EOF as an error (smithy-go, transport/http/internal/io/safe.go); io.Copy
// passes that on. When the response beats the write loop to that last read, which a fast server
// and a busy core make common, the transport takes the error for a failed write and closes the
// connection, under the response body still being read: "failed to decode response body ... use
// of closed network connection", and the SDK retries. A retried ReceiveMessage leaves the messages
// of the lost answer invisible for the visibility timeout; a retried SendMessage sends twice.
// Read after the close returns io.EOF with no error to io.Copy, so the check passes, as it should.
// Measured against goaws, 2 senders and 4 pollers for 45 s, twice each way: without this, 576-672
// connections opened and 33-55 attempts retried (and more messages received than sent); with it,
// 5-6 connections and no retry (docs/performance.md).
type requestBody struct{ io.ReadCloser }

// Retryer is the SDK's standard retryer, logging why each retried attempt failed. The SDK says
// only that it retries, and a retried call can have side effects that the caller never sees: a
// ReceiveMessage whose answer was lost has made its messages invisible for the visibility timeout.
func Retryer(log *slog.Logger) aws.RetryerV2 {
	return loggingRetryer{RetryerV2: retry.NewStandard(), log: log}
}

type loggingRetryer struct {
	aws.RetryerV2
	log *slog.Logger
}

// GetRetryToken is asked for once per attempt that failed and will be retried, with the
// operation's context.
func (r loggingRetryer) GetRetryToken(ctx context.Context, opErr error) (func(error) error, error) {
	r.log.Warn("sqs: attempt failed; retrying", "operation", awsmiddleware.GetOperationName(ctx), "err", opErr)
	return r.RetryerV2.GetRetryToken(ctx, opErr)
}
