package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

var (
	sqsOnce     sync.Once
	sqsEndpoint string
	sqsErr      error
)

// SQSEndpoint returns the SQS endpoint tests use: AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL when set
// (LocalStack, a running goaws, ...), otherwise a local goaws (tools/sqslocal) started once for this
// test binary on a free loopback port, and killed with it.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	for _, k := range []string{"AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	sqsOnce.Do(func() { sqsEndpoint, sqsErr = startSQSLocal() })
	if sqsErr != nil {
		t.Fatalf("local SQS: %v", sqsErr)
	}
	return sqsEndpoint
}

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// SQSLocalBinary returns the path of the sqslocal binary: SQSLOCAL_BIN, or bin/sqslocal built from
// tools/sqslocal (its own module) if missing.
func SQSLocalBinary() (string, error) {
	if p := os.Getenv("SQSLOCAL_BIN"); p != "" {
		return p, nil
	}
	bin := filepath.Join(RepoRoot(), "bin", "sqslocal")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(RepoRoot(), "tools", "sqslocal")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build tools/sqslocal: %v\n%s", err, out)
	}
	return bin, nil
}

func startSQSLocal() (string, error) {
	bin, err := SQSLocalBinary()
	if err != nil {
		return "", err
	}
	url, _, err := RunSQSLocal(bin) // dies with this process
	return url, err
}

// RunSQSLocal starts goaws (bin, built from tools/sqslocal) on a free loopback port, and returns
// its URL and its process, which dies with this one.
func RunSQSLocal(bin string) (string, *Child, error) {
	c, err := StartProcess(bin, []string{"-addr", "127.0.0.1:0"}, nil, os.Stderr)
	if err != nil {
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	const said = "sqslocal listening on "
	line, err := c.WaitLine(said, 30*time.Second)
	if err != nil {
		c.Kill()
		return "", nil, fmt.Errorf("sqslocal did not say where it listens: %w", err)
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, said))
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		c.Kill()
		return "", nil, fmt.Errorf("sqslocal said %q", line)
	}
	return url, c, nil
}

// SQS returns a client for SQSEndpoint. Credentials and region come from the environment when set
// (for LocalStack or AWS) and are dummies otherwise.
func SQS(t testing.TB) *sqs.Client {
	t.Helper()
	return NewSQSClient(SQSEndpoint(t))
}

// Queues creates a queue with a unique name and its DLQ, for one test.
func Queues(t testing.TB, client *sqs.Client, visibilityTimeout, maxReceiveCount int) queue.Queues {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Ensure(ctx, client, queue.QueueSpec{
		Name: "t-" + hex.EncodeToString(b), VisibilityTimeout: visibilityTimeout, MaxReceiveCount: maxReceiveCount,
	})
	if err != nil {
		t.Fatalf("create test queues: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.URL)})
		_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.DLQURL)})
	})
	return q
}

// Eventually polls cond every 20 ms until it returns true or timeout passes, then fails the test
// with msg. It awaits a condition; it is not a sleep.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// QueueDepth returns the approximate numbers of visible and in-flight messages of a queue.
func QueueDepth(t testing.TB, client *sqs.Client, url string) (visible, inFlight int) {
	t.Helper()
	out, err := client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible},
	})
	if err != nil {
		t.Fatalf("queue attributes of %s: %v", url, err)
	}
	visible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	inFlight, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, inFlight
}
