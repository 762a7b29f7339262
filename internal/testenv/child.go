package testenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// ChildRoleEnv names the environment variable that starts a test binary in a child role instead of
// running its tests. A package whose tests run real processes (to kill them) dispatches on it in
// TestMain:
//
//	func TestMain(m *testing.M) {
//		if role := os.Getenv(testenv.ChildRoleEnv); role != "" {
//			os.Exit(runChild(role))
//		}
//		os.Exit(m.Run())
//	}
const ChildRoleEnv = "EXACTLYONCE_CHILD_ROLE"

// Child is a real OS process running this test binary in a child role. Its stdout is read line
// by line; its stderr goes to the test's log.
type Child struct {
	cmd    *exec.Cmd
	lines  chan string
	exited chan struct{}
	mu     sync.Mutex
	out    []string
}

// StartChild starts this test binary in role, with env added to the environment, and kills it
// when the test ends.
func StartChild(t testing.TB, role string, env ...string) *Child {
	t.Helper()
	c, err := StartProcess(os.Args[0], nil, append([]string{ChildRoleEnv + "=" + role}, env...), testLogWriter{t})
	if err != nil {
		t.Fatalf("start child %s: %v", role, err)
	}
	t.Cleanup(func() { c.Kill() })
	return c
}

// StartProcess starts bin with args and env added to this process's environment. The process is
// killed if this one dies. stderr may be nil.
func StartProcess(bin string, args, env []string, stderr io.Writer) (*Child, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.mu.Lock()
			c.out = append(c.out, sc.Text())
			c.mu.Unlock()
			select {
			case c.lines <- sc.Text():
			default: // nobody is waiting for lines; Output still has them
			}
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// WaitLine waits up to timeout for a stdout line starting with prefix and returns it.
func (c *Child) WaitLine(prefix string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		select {
		case l := <-c.lines:
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-c.exited:
			// Lines printed just before exiting are still in the channel.
			for {
				select {
				case l := <-c.lines:
					if strings.HasPrefix(l, prefix) {
						return l, nil
					}
				default:
					return "", fmt.Errorf("child exited (%v) before printing %q; output: %q", c.cmd.ProcessState, prefix, c.Output())
				}
			}
		case <-deadline:
			return "", fmt.Errorf("child printed no %q within %s; output: %q", prefix, timeout, c.Output())
		}
	}
}

// Output returns every line the child printed so far.
func (c *Child) Output() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.out...)
}

// Kill sends SIGKILL, the process gets no chance to clean up, and waits until it has exited.
func (c *Child) Kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// Exited is closed when the process has exited.
func (c *Child) Exited() <-chan struct{} { return c.exited }

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Logf("child: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// StartSQSLocal starts a local goaws (bin/sqslocal) on a free loopback port, killed when this
// process dies, and returns its URL. For commands (cmd/chaos); tests use SQSEndpoint.
func StartSQSLocal() (string, error) { return startSQSLocal() }

// ChildStore opens the store a child process works on, from the environment the functions read
// (DB_DSN, ALLOCATOR, ...), without migrating: the parent has migrated the database, and it may be
// down when the child starts (the child then fails its work, not its start).
func ChildStore() (*mysql.Store, error) {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg.Migrate = false
	return cfg.OpenStore(context.Background())
}

// NewSQSClient returns an SQS client for endpoint with the environment's credentials and region,
// or dummies (goaws does not check them). For child processes and commands, which have no testing.TB.
func NewSQSClient(endpoint string) *sqs.Client {
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
		config.SQSOptions(slog.Default()))
}
