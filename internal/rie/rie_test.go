package rie_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/exactlyonce/exactlyonce/internal/rie"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/stretchr/testify/require"
)

// sleeper builds testdata/sleeper as a bootstrap, once per test binary.
var sleeper = sync.OnceValues(func() (string, error) {
	out := filepath.Join(tmpDir, "sleeper", "bootstrap")
	err := rie.Build(context.Background(), repo.Root(), "./internal/rie/testdata/sleeper", out, runtime.GOARCH)
	return out, err
})

var tmpDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "rie-test-")
	if err != nil {
		panic(err)
	}
	tmpDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

type answer struct {
	Pid        int    `json:"pid"`
	RequestID  string `json:"requestId"`
	DeadlineMs int64  `json:"deadlineMs"`
	ARN        string `json:"arn"`
	Memory     string `json:"memory"`
}

func start(t *testing.T, timeout time.Duration, env ...string) *rie.Function {
	t.Helper()
	bin, err := sleeper()
	require.NoError(t, err)
	f, err := rie.Start(rie.Config{Bootstrap: bin, Function: "sleeper", Timeout: timeout, MemoryMB: 512,
		Env: env, Output: testWriter{t}})
	require.NoError(t, err)
	t.Cleanup(f.Stop)
	return f
}

// The emulator, as AWS publishes it, between a bootstrap and its caller: the request id the caller
// gives is the function's and its logs', the deadline is the timeout ahead, an error is the
// runtime's error document, an exit is Runtime.ExitError and a new environment.
func TestTheEmulatorRunsABootstrapAsLambdaDoes(t *testing.T) {
	t.Parallel()
	f := start(t, 3*time.Second)
	ctx := context.Background()

	before := time.Now()
	res, err := f.Invoke(ctx, []byte(`{}`), "req-one")
	require.NoError(t, err)
	require.Nil(t, res.Error)
	var a answer
	require.NoError(t, json.Unmarshal(res.Payload, &a), string(res.Payload))
	require.Equal(t, "req-one", a.RequestID)
	require.Equal(t, "arn:aws:lambda:us-east-1:012345678912:function:sleeper", a.ARN)
	require.Equal(t, "512", a.Memory)
	// The deadline is the timeout after the invocation started.
	require.GreaterOrEqual(t, a.DeadlineMs, before.Add(3*time.Second).UnixMilli()-50)
	require.LessOrEqual(t, a.DeadlineMs, time.Now().Add(3*time.Second).UnixMilli()+50)
	logs := f.Logs("req-one")
	require.NotEmpty(t, logs, strings.Join(f.Output(), "\n"))
	require.Contains(t, strings.Join(logs, "\n"), `"requestId":"req-one"`)
	require.Contains(t, f.Report("req-one"), "Init Duration", "the first invocation of an environment inits it")

	res, err = f.Invoke(ctx, []byte(`{"fail":true}`), "")
	require.NoError(t, err)
	require.Equal(t, &rie.FunctionError{Type: "errorString", Message: "asked to fail"}, res.Error)
	require.NotContains(t, f.Report(res.RequestID), "Init Duration", "warm")

	res, err = f.Invoke(ctx, []byte(`{"exit":true}`), "")
	require.NoError(t, err)
	require.Equal(t, 502, res.Status)
	require.Equal(t, "Runtime.ExitError", res.Error.Type)

	res, err = f.Invoke(ctx, []byte(`{}`), "")
	require.NoError(t, err)
	var b answer
	require.NoError(t, json.Unmarshal(res.Payload, &b), string(res.Payload))
	require.NotEqual(t, a.Pid, b.Pid, "a new runtime after the exit")
}

// A handler that outlives its timeout is stopped as on AWS: the caller gets "Task timed out", the
// runtime is killed, and the next invocation gets a fresh one.
func TestAHandlerThatOutlivesItsTimeoutIsStopped(t *testing.T) {
	t.Parallel()
	// 3 s, not 1: the invocations around the one that times out must answer within it, a fresh
	// runtime's start included, which a loaded machine can stretch past a second.
	f := start(t, 3*time.Second)
	ctx := context.Background()
	res, err := f.Invoke(ctx, []byte(`{}`), "")
	require.NoError(t, err)
	var a answer
	require.NoError(t, json.Unmarshal(res.Payload, &a), string(res.Payload))

	res, err = f.Invoke(ctx, []byte(`{"sleep":60}`), "")
	require.NoError(t, err)
	require.True(t, res.TimedOut, "%+v", res)
	require.Equal(t, "Task timed out after 3.00 seconds", res.Error.Message)
	require.Less(t, res.Duration, 30*time.Second, "stopped at its timeout, not when it finished")
	gone(t, a.Pid, "the runtime that timed out is killed")

	res, err = f.Invoke(ctx, []byte(`{}`), "")
	require.NoError(t, err)
	var b answer
	require.NoError(t, json.Unmarshal(res.Payload, &b), string(res.Payload))
	require.NotEqual(t, a.Pid, b.Pid)
	require.Contains(t, f.Report(res.RequestID), "REPORT RequestId: "+res.RequestID)
}

// A runtime that exits at init (a function missing its configuration) is Runtime.ExitError, and
// tried again at the next invocation.
func TestARuntimeThatExitsAtInitIsAnExitError(t *testing.T) {
	t.Parallel()
	f := start(t, 3*time.Second, "SLEEPER_EXIT_AT_INIT=1")
	for range 2 {
		res, err := f.Invoke(context.Background(), []byte(`{}`), "")
		require.NoError(t, err)
		require.Equal(t, 502, res.Status)
		require.Equal(t, "Runtime.ExitError", res.Error.Type)
	}
	// The bootstrap's lines reach Output through the emulator's pipe, which may deliver the second
	// init's line after the invocation has answered: wait for it.
	inits := func() int {
		n := 0
		for _, l := range f.Output() {
			if strings.HasPrefix(l, "init pid ") {
				n++
			}
		}
		return n
	}
	testutil.Eventually(t, 10*time.Second, "the runtime is started again at the second invocation", func() bool { return inits() >= 2 })
	require.Equal(t, 2, inits())
}

// Stop ends the bootstrap with the emulator.
func TestStopEndsTheBootstrap(t *testing.T) {
	t.Parallel()
	f := start(t, 3*time.Second)
	res, err := f.Invoke(context.Background(), []byte(`{}`), "")
	require.NoError(t, err)
	var a answer
	require.NoError(t, json.Unmarshal(res.Payload, &a), string(res.Payload))
	f.Stop()
	gone(t, a.Pid, "the bootstrap ends with the emulator")
}

func gone(t *testing.T, pid int, msg string) {
	testutil.Eventually(t, 10*time.Second, msg, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH })
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
