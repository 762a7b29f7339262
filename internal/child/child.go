// Package child runs real OS processes that a test or the chaos run can kill: a test binary started
// again in a child role (a processor, an API), a process of the chaos run, or a helper binary such
// as the local SQS endpoint. A child dies with its parent (PDEATHSIG), and its stdout is read line
// by line, so that the parent can wait for what the child says ("started", "claimed 7").
package child

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// RoleEnv names the environment variable that starts a binary in a child role instead of doing
// its usual job. A package whose tests run real processes (to kill them) dispatches on it in
// TestMain, and a command that starts itself again (cmd/chaos) in main:
//
//	func TestMain(m *testing.M) {
//		if role := os.Getenv(child.RoleEnv); role != "" {
//			os.Exit(runChild(role))
//		}
//		os.Exit(m.Run())
//	}
const RoleEnv = "EXACTLYONCE_CHILD_ROLE"

// Process is a real OS process started by this one. Its stdout is read line by line.
type Process struct {
	cmd    *exec.Cmd
	lines  chan string
	exited chan struct{}
	mu     sync.Mutex
	out    []string
}

// Start starts this test binary in role, with env added to the environment, and kills it when the
// test ends. Its stderr goes to the test's log.
func Start(t testing.TB, role string, env ...string) *Process {
	t.Helper()
	c, err := StartProcess(os.Args[0], nil, append([]string{RoleEnv + "=" + role}, env...), testLogWriter{t})
	if err != nil {
		t.Fatalf("start child %s: %v", role, err)
	}
	t.Cleanup(func() { c.Kill() })
	return c
}

// StartProcess starts bin with args and env added to this process's environment. The process is
// killed if this one dies. stderr may be nil.
func StartProcess(bin string, args, env []string, stderr io.Writer) (*Process, error) {
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
	c := &Process{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{})}
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
func (c *Process) Pid() int { return c.cmd.Process.Pid }

// WaitLine waits up to timeout for a stdout line starting with prefix and returns it.
func (c *Process) WaitLine(prefix string, timeout time.Duration) (string, error) {
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

// Endpoint is a local endpoint running as a child process (sqslocal, s3local).
type Endpoint struct {
	// URL is the endpoint, http://127.0.0.1:<port>.
	URL  string
	proc *Process
}

// Pid is the endpoint's process id (the benchmark charges its CPU time to it).
func (e *Endpoint) Pid() int { return e.proc.Pid() }

// Stop kills the endpoint and waits until it has exited. What it held in memory is gone.
func (e *Endpoint) Stop() { e.proc.Kill() }

// Pause stops the endpoint's process with SIGSTOP and returns once the kernel has stopped it
// (state T in /proc/<pid>/stat), so that no request sent after it is answered: the kernel still
// completes TCP handshakes on its port, and nothing answers, as with a server that stalls. Resume
// continues it; Stop kills it, paused or not.
func (e *Endpoint) Pause() error {
	pid := e.proc.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		// pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last ')'.
		if rest := string(b[strings.LastIndexByte(string(b), ')')+1:]); strings.HasPrefix(strings.TrimSpace(rest), "T") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped 10 s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// Resume continues an endpoint Pause stopped.
func (e *Endpoint) Resume() error { return syscall.Kill(e.proc.Pid(), syscall.SIGCONT) }

// StartEndpoint starts bin with args (a local endpoint: sqslocal, s3local) and waits until it prints
// "<name> listening on http://127.0.0.1:<port>". A child that exits first, or says something else,
// is killed and reported. The process dies with this one.
func StartEndpoint(bin string, args []string, name string) (*Endpoint, error) {
	c, err := StartProcess(bin, args, nil, os.Stderr)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	said := name + " listening on "
	line, err := c.WaitLine(said, 30*time.Second)
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("%s did not say where it listens: %w", name, err)
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, said))
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		c.Kill()
		return nil, fmt.Errorf("%s said %q", name, line)
	}
	return &Endpoint{URL: url, proc: c}, nil
}

// EndpointAWS is the region and credentials of a client of a local endpoint: the environment's, or
// us-east-1 and dummies (the local endpoints do not check them).
func EndpointAWS() (region string, creds aws.CredentialsProvider) {
	region = os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	creds = credentials.NewStaticCredentialsProvider("test", "test", "")
	if os.Getenv("AWS_ACCESS_KEY_ID") != "" {
		creds = credentials.NewStaticCredentialsProvider(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN"))
	}
	return region, creds
}

// Output returns every line the child printed so far.
func (c *Process) Output() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.out...)
}

// Kill sends SIGKILL, the process gets no chance to clean up, and waits until it has exited.
func (c *Process) Kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// Exited is closed when the process has exited.
func (c *Process) Exited() <-chan struct{} { return c.exited }

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Logf("child: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// OpenStores opens the stores a child process works on, from the environment the functions read
// (DB_DSN, ALLOCATOR, ...), without migrating: the parent has migrated the database, and it may be
// down when the child starts (the child then fails its work, not its start).
func OpenStores() (*wire.Stores, error) {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg.DB.Migrate = new(false)
	return wire.OpenStores(context.Background(), cfg)
}
