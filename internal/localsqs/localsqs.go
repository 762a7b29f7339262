// Package localsqs is the local SQS endpoint: goaws, wrapped by tools/sqslocal (its own module,
// built to bin/sqslocal), run as a child process on a free loopback port. Start is the one way to
// start it, for commands (the benchmark, the chaos run, cmd/invoke) and tests alike; Endpoint gives
// a test binary one shared endpoint, or the one the environment names.
package localsqs

import (
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/repo"
)

// Binary returns the path of the sqslocal binary: SQSLOCAL_BIN, or bin/sqslocal, built from
// tools/sqslocal (its own module) if missing.
func Binary() (string, error) {
	return repo.Tool{Env: "SQSLOCAL_BIN", Name: "sqslocal", Dir: "sqslocal", Pkg: "."}.Binary()
}

// Server is a running local SQS endpoint.
type Server = child.Endpoint

// Start starts goaws (bin, or Binary when bin is empty) on a free loopback port and waits until it
// says where it listens. The process dies with this one; Stop ends it sooner.
func Start(bin string) (*Server, error) {
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	return child.StartEndpoint(bin, []string{"-addr", "127.0.0.1:0"}, "sqslocal")
}

// NewClient returns an SQS client for endpoint with the environment's credentials and region, or
// dummies (goaws does not check them).
func NewClient(endpoint string) *sqs.Client {
	region, creds := child.EndpointAWS()
	// The project's own client options, so that tests exercise the client the product uses; retries
	// are logged to stderr.
	return sqs.New(sqs.Options{Region: region, Credentials: creds, BaseEndpoint: aws.String(endpoint)},
		queue.ClientOptions(slog.Default()))
}
