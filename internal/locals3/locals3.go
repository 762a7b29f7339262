// Package locals3 is the local S3 endpoint: gofakes3, wrapped by tools/s3local (its own module,
// built to bin/s3local), run as a child process on a free loopback port, as internal/localsqs runs
// the local SQS. Start is the one way to start it, for commands (the benchmark) and tests alike;
// Endpoint gives a test binary one shared endpoint, or the one the environment names.
package locals3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/repo"
)

// Binary returns the path of the s3local binary: S3LOCAL_BIN, or bin/s3local, built from
// tools/s3local (its own module) if missing.
func Binary() (string, error) {
	return repo.Tool{Env: "S3LOCAL_BIN", Name: "s3local", Dir: "s3local", Pkg: "."}.Binary()
}

// Server is a running local S3 endpoint.
type Server = child.Endpoint

// Start starts gofakes3 (bin, or Binary when bin is empty) on a free loopback port, keeping its
// objects under dir (empty: in memory), creating buckets, and waits until it says where it
// listens. The process dies with this one; Stop ends it sooner.
func Start(bin, dir string, buckets ...string) (*Server, error) {
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	args := []string{"-addr", "127.0.0.1:0"}
	if dir != "" {
		args = append(args, "-dir", dir)
	}
	for _, b := range buckets {
		args = append(args, "-bucket", b)
	}
	return child.StartEndpoint(bin, args, "s3local")
}

// NewClient returns an S3 client for endpoint with the project's client options (archive.ClientOptions:
// path-style addressing, which a loopback endpoint needs) and dummy credentials (gofakes3 does not
// check them) unless the environment has some.
func NewClient(endpoint string) *s3.Client {
	region, creds := child.EndpointAWS()
	return s3.New(s3.Options{Region: region, Credentials: creds, BaseEndpoint: aws.String(endpoint)}, archive.ClientOptions(true))
}

var (
	shared    *Server
	sharedErr error
	startOnce sync.Once
)

// Endpoint returns the S3 endpoint tests use: AWS_ENDPOINT_URL_S3 when set, otherwise a local
// gofakes3 started (Start, in memory) once for this test binary, and killed with it.
func Endpoint(t testing.TB) string {
	t.Helper()
	if v := os.Getenv("AWS_ENDPOINT_URL_S3"); v != "" {
		return v
	}
	startOnce.Do(func() { shared, sharedErr = Start("", "") })
	if sharedErr != nil {
		t.Fatalf("local S3: %v", sharedErr)
	}
	return shared.URL
}

// Client returns a client for Endpoint.
func Client(t testing.TB) *s3.Client {
	t.Helper()
	return NewClient(Endpoint(t))
}

// Bucket creates a bucket with a unique name for one test and returns its name. It is left
// behind (the endpoint's state goes with its process).
func Bucket(t testing.TB, client *s3.Client) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create test bucket: %v", err)
	}
	return name
}
