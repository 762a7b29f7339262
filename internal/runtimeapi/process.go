package runtimeapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

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

// Process is a bootstrap executable running against its own Runtime API server, as in one Lambda
// execution environment.
type Process struct {
	Server    *Server
	StartedAt time.Time
	cmd       *exec.Cmd
	exited    chan struct{}
	err       error // the process's exit status, once exited
}

// ProcessConfig says how to start a bootstrap.
type ProcessConfig struct {
	// Bootstrap is the executable's path.
	Bootstrap string
	// Function names the function (AWS_LAMBDA_FUNCTION_NAME and the ARN).
	Function string
	// Env is added to the environment Lambda sets; the process inherits nothing else but PATH
	// and HOME, as a Lambda environment has only what the function is configured with.
	Env []string
	// Timeout is the function timeout. Default 30 s.
	Timeout time.Duration
	// Output receives the process's stdout and stderr (its logs). Default: discarded.
	Output io.Writer
}

// StartProcess starts the Runtime API server and the bootstrap against it.
func StartProcess(cfg ProcessConfig) (*Process, error) {
	region := "us-east-1"
	for _, kv := range cfg.Env {
		if v, ok := strings.CutPrefix(kv, "AWS_REGION="); ok && v != "" {
			region = v
		}
	}
	arn := "arn:aws:lambda:" + region + ":000000000000:function:" + cfg.Function
	srv, err := Start(arn, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Bootstrap)
	cmd.Dir = filepath.Dir(cfg.Bootstrap)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TZ=:UTC", "LANG=en_US.UTF-8",
		"AWS_LAMBDA_RUNTIME_API=" + srv.Addr(),
		"AWS_LAMBDA_FUNCTION_NAME=" + cfg.Function,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/" + cfg.Function,
		"AWS_EXECUTION_ENV=AWS_Lambda_provided.al2023",
		"LAMBDA_TASK_ROOT=" + filepath.Dir(cfg.Bootstrap),
		"_HANDLER=bootstrap",
		"AWS_REGION=" + region, "AWS_DEFAULT_REGION=" + region,
	}, cfg.Env...)
	out := cfg.Output
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		srv.Close()
		return nil, err
	}
	p := &Process{Server: srv, cmd: cmd, exited: make(chan struct{}), StartedAt: time.Now()}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Invoke sends one event and waits for the answer. If the process exits first, the result is a
// Runtime.ExitError, as Lambda reports it.
func (p *Process) Invoke(ctx context.Context, payload []byte) (Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-p.exited:
			cancel(fmt.Errorf("runtime exited: %v", p.err))
		case <-ctx.Done():
		}
	}()
	res, err := p.Server.Invoke(ctx, payload)
	if errors.Is(err, ErrNoRuntime) {
		select {
		case <-p.exited:
			res.Error = &FunctionError{Type: "Runtime.ExitError", Message: fmt.Sprintf("Runtime exited with error: %v", p.err)}
			if fe := p.Server.InitErr(); fe != nil {
				res.Error = fe
			}
			return res, nil
		default:
		}
	}
	return res, err
}

// InitDuration is how long the process took from its start to its first poll for an event (what
// Lambda reports as Init Duration), or 0 if it has not polled yet.
func (p *Process) InitDuration() time.Duration {
	if at := p.Server.FirstPollAt(); !at.IsZero() {
		return at.Sub(p.StartedAt)
	}
	return 0
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop ends the process (SIGTERM, as Lambda's shutdown phase, then SIGKILL after 2 s) and the server.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.Server.Close()
}
