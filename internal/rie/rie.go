// Package rie runs a function's real bootstrap under the AWS Lambda Runtime Interface Emulator
// (github.com/aws/aws-lambda-runtime-interface-emulator, cmd/aws-lambda-rie): the Runtime API that
// AWS's own base images and `sam local invoke` run inside their containers, here run as a plain
// process, without Docker. tools/rie pins it (its own module) and `make rie` builds it into
// bin/aws-lambda-rie; Binary builds it when it is missing.
//
// Each Function is one execution environment: one emulator on two free loopback ports (its invoke
// endpoint and the Runtime API the bootstrap polls), which starts the bootstrap on the first
// invocation and, as Lambda does, kills it and starts a new one after an invocation times out or the
// runtime exits. Invoke sends an event to POST /2015-03-31/functions/function/invocations with the
// request id to use (X-Amzn-RequestId) and reads the answer as the emulator gives it:
//
//   - the function's response: 200 and the payload;
//   - a function error: 200 and {"errorType", "errorMessage"} (the emulator drops the
//     X-Amz-Function-Error header Lambda sets, so the document's shape is what tells them apart);
//   - the runtime exited: 502 and a Runtime.ExitError document (no document when it exited during
//     init: Invoke reports Runtime.ExitError then too, as Lambda does);
//   - a timeout (AWS_LAMBDA_FUNCTION_TIMEOUT, whole seconds): 200 and "Task timed out after N.00
//     seconds", the runtime killed with SIGKILL.
//
// The emulator prints START, END and REPORT lines around each invocation, with its request id, on
// its stdout, where the function's own output goes too: Logs returns one invocation's lines.
package rie

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/repo"
)

// Binary returns the path of the emulator: RIE_BIN, or bin/aws-lambda-rie, built with `go build`
// from tools/rie (its own module, so the pinned version is in tools/rie/go.mod) if missing.
func Binary() (string, error) {
	return repo.Tool{Env: "RIE_BIN", Name: "aws-lambda-rie", Dir: "rie",
		Pkg: "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"}.Binary()
}

// BuildBootstrap builds functions/<function> of the repository at root as Lambda's provided.al2023
// runtime expects it (an executable named bootstrap, GOOS=linux, CGO_ENABLED=0, -tags
// lambda.norpc, -trimpath, -ldflags "-s -w"), for this machine's architecture so it can run here,
// into dir, and returns its path.
func BuildBootstrap(ctx context.Context, root, function, dir string) (string, error) {
	out := filepath.Join(dir, function, "bootstrap")
	if err := Build(ctx, root, "./functions/"+function, out, runtime.GOARCH); err != nil {
		return "", fmt.Errorf("build %s: %w", function, err)
	}
	return out, nil
}

// Build builds the package pkg (a path relative to dir) into out the way BuildBootstrap does, for
// the architecture arch, with env added to the build's environment.
func Build(ctx context.Context, dir, pkg, out, arch string, env ...string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w\n%s", err, b)
	}
	return nil
}

// Config says how to start a function.
type Config struct {
	// Bootstrap is the executable's path. The emulator runs it in its directory.
	Bootstrap string
	// Function names the function (AWS_LAMBDA_FUNCTION_NAME; the emulator's ARN is
	// arn:aws:lambda:us-east-1:012345678912:function:<Function>).
	Function string
	// Env is the function's configuration. The bootstrap sees it and what Lambda sets, and nothing
	// of this process's environment but PATH and HOME.
	Env []string
	// Timeout is the function timeout, in whole seconds (rounded up). Default 30 s.
	Timeout time.Duration
	// MemoryMB is AWS_LAMBDA_FUNCTION_MEMORY_SIZE. Default 256, the deployed functions' size.
	MemoryMB int
	// Output receives everything the emulator and the function print, as it comes. Default:
	// discarded (Logs keeps it).
	Output io.Writer
	// Bin is the emulator (default: Binary).
	Bin string
	// LogLevel is the emulator's own (--log-level: debug, info, warn, error). Default warn: its
	// START, END and REPORT lines are printed at any level.
	LogLevel string
}

// Function is one execution environment: the emulator and, once invoked, the bootstrap under it.
type Function struct {
	// URL is the invoke endpoint, http://127.0.0.1:<port>/2015-03-31/functions/function/invocations.
	URL string
	// RuntimeAPI is the Runtime API's address (what the bootstrap gets as AWS_LAMBDA_RUNTIME_API).
	RuntimeAPI string
	// Timeout is the function timeout the emulator enforces.
	Timeout time.Duration

	cmd    *exec.Cmd
	exited chan struct{}
	invoke sync.Mutex // the emulator serves one invocation at a time, as an environment does

	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed, and replaced, when a line is added
}

// Invocations is the invoke endpoint's path.
const Invocations = "/2015-03-31/functions/function/invocations"

// Start starts the emulator for cfg's bootstrap on two free loopback ports and waits until it
// accepts invocations. The emulator dies with this process; Stop ends it and the bootstrap sooner.
func Start(cfg Config) (*Function, error) {
	var lastErr error
	for range 3 { // a port picked free may be taken before the emulator binds it: pick again
		f, err := start(cfg)
		if err == nil {
			return f, nil
		}
		lastErr = err
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, lastErr
}

var errExited = errors.New("the emulator exited")

func start(cfg Config) (*Function, error) {
	bin := cfg.Bin
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	bootstrap, err := filepath.Abs(cfg.Bootstrap)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	secs := int64((timeout + time.Second - 1) / time.Second)
	memory := cfg.MemoryMB
	if memory <= 0 {
		memory = 256
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	invokeAddr, runtimeAddr := "127.0.0.1:"+ports[0], "127.0.0.1:"+ports[1]
	region := "us-east-1"
	for _, kv := range cfg.Env {
		if v, ok := strings.CutPrefix(kv, "AWS_REGION="); ok && v != "" {
			region = v
		}
	}
	logLevel := cfg.LogLevel
	if logLevel == "" {
		logLevel = "warn"
	}
	cmd := exec.Command(bin, "--log-level", logLevel, "--runtime-interface-emulator-address", invokeAddr,
		"--runtime-api-address", runtimeAddr, bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	// The emulator hands its whole environment to the bootstrap: this is the function's.
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TZ=:UTC", "LANG=en_US.UTF-8",
		"AWS_LAMBDA_FUNCTION_NAME=" + cfg.Function,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=" + strconv.Itoa(memory),
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.FormatInt(secs, 10),
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/" + cfg.Function,
		"AWS_LAMBDA_LOG_STREAM_NAME=local",
		"AWS_EXECUTION_ENV=AWS_Lambda_provided.al2023",
		"LAMBDA_TASK_ROOT=" + filepath.Dir(bootstrap),
		"_HANDLER=bootstrap",
		"AWS_REGION=" + region, "AWS_DEFAULT_REGION=" + region,
	}, cfg.Env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	f := &Function{URL: "http://" + invokeAddr + Invocations, RuntimeAPI: runtimeAddr, Timeout: time.Duration(secs) * time.Second,
		cmd: cmd, exited: make(chan struct{}), changed: make(chan struct{})}
	out := cfg.Output
	if out == nil {
		out = io.Discard
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			f.mu.Lock()
			f.lines = append(f.lines, sc.Text())
			close(f.changed)
			f.changed = make(chan struct{})
			f.mu.Unlock()
			fmt.Fprintln(out, sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		<-done
		close(f.exited)
	}()
	// Ready when the invoke endpoint accepts connections (the emulator says nothing when it listens).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", invokeAddr, time.Second)
		if err == nil {
			c.Close()
			select {
			case <-f.exited:
				return nil, fmt.Errorf("%w: %s", errExited, strings.Join(f.Output(), "\n"))
			default:
			}
			// What answered may be another process that took the port after freePorts let it go
			// (the emulator then fails to bind it and exits, but later): where /proc tells, the
			// listener must be the emulator's own.
			if owned, known := listensOn(cmd.Process.Pid, ports[0]); known && !owned {
				f.Stop()
				return nil, fmt.Errorf("%w: another process listens on %s", errExited, invokeAddr)
			}
			return f, nil
		}
		select {
		case <-f.exited:
			return nil, fmt.Errorf("%w: %s", errExited, strings.Join(f.Output(), "\n"))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			f.Stop()
			return nil, fmt.Errorf("the emulator did not listen on %s within 30 s", invokeAddr)
		}
	}
}

// listensOn tells whether process pid holds the socket listening on 127.0.0.1:port, and whether
// that could be known: it reads /proc (Linux); elsewhere it knows nothing.
func listensOn(pid int, port string) (owned, known bool) {
	n, err := strconv.Atoi(port)
	if err != nil {
		return false, false
	}
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false, false
	}
	// local_address 0100007F:PPPP (127.0.0.1, little-endian address, big-endian port), state 0A
	// (LISTEN), inode the tenth field.
	want := fmt.Sprintf("0100007F:%04X", n)
	inode := ""
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 10 && f[1] == want && f[3] == "0A" {
			inode = f[9]
		}
	}
	if inode == "" {
		return false, true // nobody listens: what answered was not the emulator
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, false
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && l == "socket:["+inode+"]" {
			return true, true
		}
	}
	return false, true
}

// freePorts returns n distinct loopback ports free when asked.
func freePorts(n int) ([]string, error) {
	var ports []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		ports = append(ports, port)
	}
	return ports, nil
}

// Result is the emulator's answer to one invocation.
type Result struct {
	// RequestID is the invocation's request id (the one Invoke was given, or one it made).
	RequestID string
	// Status is the emulator's HTTP status: 200, or 502 when the runtime exited.
	Status int
	// Payload is the function's response; nil if it failed or timed out.
	Payload []byte
	// Error is the function's error document, or nil.
	Error *FunctionError
	// TimedOut says the function outlived its timeout and was stopped.
	TimedOut bool
	// Duration is how long the invocation took, as seen by the caller.
	Duration time.Duration
}

// FunctionError is the error document of a failed invocation (errorType, errorMessage).
type FunctionError struct {
	Type       string          `json:"errorType"`
	Message    string          `json:"errorMessage"`
	StackTrace json.RawMessage `json:"stackTrace,omitempty"`
}

func (e *FunctionError) Error() string { return e.Type + ": " + e.Message }

// Invoke sends payload as one invocation with requestID (a new one when empty) and waits for the
// answer; ctx bounds the wait (the emulator itself stops the function at its timeout).
func (f *Function) Invoke(ctx context.Context, payload []byte, requestID string) (Result, error) {
	f.invoke.Lock()
	defer f.invoke.Unlock()
	if requestID == "" {
		requestID = NewRequestID()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL, bytes.NewReader(payload))
	if err != nil {
		return Result{}, err
	}
	req.Header.Set("X-Amzn-RequestId", requestID)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Result{RequestID: requestID}, fmt.Errorf("invoke %s: %w", requestID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Result{RequestID: requestID}, err
	}
	res := Result{RequestID: requestID, Status: resp.StatusCode, Duration: time.Since(start)}
	switch {
	case resp.StatusCode == http.StatusOK && bytes.HasPrefix(body, []byte("Task timed out after ")):
		res.TimedOut = true
		res.Error = &FunctionError{Type: "Sandbox.Timedout", Message: string(body)}
	case isErrorDocument(body):
		res.Error = &FunctionError{}
		_ = json.Unmarshal(body, res.Error)
	case resp.StatusCode == http.StatusBadGateway && len(bytes.TrimSpace(body)) == 0:
		// The emulator's answer when the runtime exited during init, before it asked for the event:
		// Lambda reports Runtime.ExitError for it.
		res.Error = &FunctionError{Type: "Runtime.ExitError", Message: "the runtime exited during init (its output says why)"}
	case resp.StatusCode != http.StatusOK:
		return res, fmt.Errorf("invoke %s: the emulator answered %d: %s", requestID, resp.StatusCode, body)
	default:
		res.Payload = body
	}
	// The emulator prints the REPORT line before it answers (none when the runtime exited), but its
	// output is read through a pipe: wait for it, so that Logs and Report have the whole invocation.
	if res.Status == http.StatusOK {
		f.waitLine(func(l string) bool { return strings.HasPrefix(l, "REPORT RequestId: "+requestID) }, 10*time.Second)
	}
	return res, nil
}

// WaitOutput waits up to timeout until a line containing s has been printed, and tells whether one
// was. The output is read through a pipe: a runtime that exited at init (Runtime.ExitError) may
// have its last lines delivered after the invocation answered.
func (f *Function) WaitOutput(s string, timeout time.Duration) bool {
	return f.waitLine(func(l string) bool { return strings.Contains(l, s) }, timeout)
}

// waitLine waits up to timeout until a line for which match is true has been printed.
func (f *Function) waitLine(match func(string) bool, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen, exited := 0, false
	for !exited {
		f.mu.Lock()
		lines, changed := f.lines[seen:], f.changed
		seen = len(f.lines)
		f.mu.Unlock()
		for _, l := range lines {
			if match(l) {
				return true
			}
		}
		select {
		case <-changed:
		case <-f.exited:
			exited = true // one more look: its last lines are in
		case <-deadline.C:
			return false
		}
	}
	return false
}

// isErrorDocument tells whether body is a runtime's error document: an object with errorType and
// errorMessage and nothing else but a stack trace. No function here answers with such an object.
func isErrorDocument(body []byte) bool {
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil {
		return false
	}
	_, hasType := doc["errorType"]
	_, hasMessage := doc["errorMessage"]
	delete(doc, "stackTrace")
	return hasType && hasMessage && len(doc) == 2
}

// NewRequestID returns a random request id shaped as Lambda's (a UUID).
func NewRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := fmt.Sprintf("%x", b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Output returns every line the emulator and the function printed so far.
func (f *Function) Output() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lines...)
}

// Logs returns the lines printed during the invocation requestID: from the emulator's START line
// to its REPORT line, both included (nil if there is no START line for it). The function's own lines
// are among them, with the emulator's.
func (f *Function) Logs(requestID string) []string {
	lines := f.Output()
	var out []string
	for _, l := range lines {
		if out == nil && strings.HasPrefix(l, "START RequestId: "+requestID+" ") {
			out = []string{l}
			continue
		}
		if out != nil {
			out = append(out, l)
			if strings.HasPrefix(l, "REPORT RequestId: "+requestID) {
				break
			}
		}
	}
	return out
}

// Report returns the REPORT line of the invocation requestID, or "".
func (f *Function) Report(requestID string) string {
	for _, l := range f.Output() {
		if strings.HasPrefix(l, "REPORT RequestId: "+requestID) {
			return l
		}
	}
	return ""
}

// Stop ends the emulator (SIGTERM: it stops the bootstrap, as Lambda's shutdown phase does; SIGKILL
// after 5 s) and waits until it has exited.
func (f *Function) Stop() {
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.exited:
	case <-time.After(5 * time.Second):
		_ = f.cmd.Process.Kill()
		<-f.exited
	}
}

// Exited is closed when the emulator has exited.
func (f *Function) Exited() <-chan struct{} { return f.exited }
