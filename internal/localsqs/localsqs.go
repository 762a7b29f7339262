// Package localsqs is the local SQS endpoint: goaws, wrapped by tools/sqslocal (its own module,
// built to bin/sqslocal), run as a child process on a free loopback port. Start is the one way to
// start it, for commands (the benchmark, the chaos run, cmd/invoke) and tests alike; Endpoint gives
// a test binary one shared endpoint, or the one the environment names.
package localsqs

import (
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
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
type Server struct {
	// URL is the endpoint, http://127.0.0.1:<port>.
	URL  string
	proc *child.Process
}

// Start starts goaws (bin, or Binary when bin is empty) on a free loopback port and waits until it
// says where it listens. The process dies with this one; Stop ends it sooner.
func Start(bin string) (*Server, error) {
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	c, url, err := child.StartEndpoint(bin, []string{"-addr", "127.0.0.1:0"}, "sqslocal")
	if err != nil {
		return nil, err
	}
	return &Server{URL: url, proc: c}, nil
}

// Pid is the endpoint's process id (the benchmark charges its CPU time to it).
func (s *Server) Pid() int { return s.proc.Pid() }

// Stop kills the endpoint and waits until it has exited. Its queues and messages are gone.
func (s *Server) Stop() { s.proc.Kill() }

// NewClient returns an SQS client for endpoint with the environment's credentials and region, or
// dummies (goaws does not check them).
func NewClient(endpoint string) *sqs.Client {
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	var creds aws.CredentialsProvider = credentials.NewStaticCredentialsProvider("test", "test", "")
	if os.Getenv("AWS_ACCESS_KEY_ID") != "" {
		creds = credentials.NewStaticCredentialsProvider(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN"))
	}
	// The project's own client options, so that tests exercise the client the product uses; retries
	// are logged to stderr.
	return sqs.New(sqs.Options{Region: region, Credentials: creds, BaseEndpoint: aws.String(endpoint)},
		queue.ClientOptions(slog.Default()))
}
