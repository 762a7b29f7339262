package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/locals3"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Ctrl-C on `make run` stops everything in order, as a terminal sends it: SIGINT to the whole
// process group (scripts/run.sh, the local SQS endpoint, the runner). A processor batch under way
// (a task whose receiver holds its answer) finishes, its message is deleted from the local queue,
// and the run logs nothing at WARN or above on the way out. The local SQS endpoint took the SIGINT
// too and stopped at once, so the batch's DeleteMessageBatch failed ("connection refused") and
// "messages will be delivered again".
func TestCtrlCStopsInOrder(t *testing.T) {
	t.Parallel()
	s3local, err := locals3.Binary()
	require.NoError(t, err)
	sqslocal, err := localsqs.Binary()
	require.NoError(t, err)
	dsn := testdb.NewDatabase(t)

	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var deliveries int
	var mu sync.Mutex
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		deliveries++
		mu.Unlock()
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(recv.Close)
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseOnce)

	cmd := exec.Command("bash", filepath.Join(repo.Root(), "scripts", "run.sh"))
	// WEBHOOK_ALLOW_LOOPBACK unset, whatever this process has, so that run.sh puts in true as `make
	// run` does (set to nothing, it is refused).
	inherited := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "WEBHOOK_ALLOW_LOOPBACK=") })
	cmd.Env = append(inherited, child.RoleEnv+"="+roleLocal, "LOCAL_BIN="+os.Args[0], "SQSLOCAL_BIN="+sqslocal,
		"S3LOCAL_BIN="+s3local, fmt.Sprintf("S3LOCAL_PORT=%d", freePort(t)), "S3LOCAL_DIR="+t.TempDir(), "AWS_ENDPOINT_URL_S3=",
		fmt.Sprintf("SQSLOCAL_PORT=%d", freePort(t)), "HTTP_ADDR=127.0.0.1:0", "METRICS_ADDR=off", "DB_DSN="+dsn,
		"AWS_ENDPOINT_URL_SQS=", "AWS_ENDPOINT_URL=", "AWS_ENDPOINT_URL_SNS=", "WEBHOOK_SECRET=", "WEBHOOK_SECRET_ARN=",
		"LOG_LEVEL=info", "KEEP_DB=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a process group of its own, as a terminal's job
	out := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	})

	var api string
	// The run migrates its new database first: slow on a loaded machine, never wrong. The bound is
	// for a run that hangs.
	testutil.Eventually(t, 5*time.Minute, "the run listening", func() bool {
		select {
		case err := <-exited: // a run that ended before listening will not listen: say why now
			exited <- err // for the cleanup
			t.Fatalf("the run ended before its API listened (%v):\n%s", err, out.String())
		default:
		}
		if r := withMsg(logLines(out.String()), "local: api listening"); r != nil {
			api, _ = r["url"].(string)
		}
		return api != ""
	})
	resp, err := http.Post(api+"/events/async", "application/json",
		strings.NewReader(fmt.Sprintf(`{"url":%q,"referenceId":"ctrl-c"}`, recv.URL)))
	require.NoError(t, err)
	var created struct{ ID int64 }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	select {
	case <-arrived: // the processor's batch is under way, waiting on the receiver
	case <-time.After(60 * time.Second):
		t.Fatalf("the task never reached its receiver:\n%s", out.String())
	}

	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)) // Ctrl-C
	testutil.Eventually(t, 30*time.Second, "the runner stopping", func() bool {
		return withMsg(logLines(out.String()), "local: api stopped") != nil
	})
	releaseOnce()
	select {
	case err := <-exited:
		require.NoError(t, err, "Ctrl-C after a clean stop exits 0:\n%s", out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the run did not stop:\n%s", out.String())
	}

	text := out.String()
	require.NotContains(t, text, "connection refused", text)
	require.NotContains(t, text, "delivered again", text)
	recs := logLines(text)
	stopping := -1
	for i, r := range recs {
		if r["msg"] == "local: stopping" {
			stopping = i
		}
		if stopping >= 0 && (r["level"] == "WARN" || r["level"] == "ERROR") {
			t.Errorf("logged at %s while stopping: %v", r["level"], r)
		}
	}
	require.GreaterOrEqual(t, stopping, 0, text)
	// In order: the API, then the parts behind it, then the database, then the local SQS endpoint.
	at := func(s string) int {
		i := strings.Index(text, s)
		require.GreaterOrEqual(t, i, 0, "%q missing:\n%s", s, text)
		return i
	}
	require.Less(t, at(`"msg":"local: stopping"`), at(`"msg":"local: api stopped"`))
	require.Less(t, at(`"msg":"local: api stopped"`), at(`"msg":"processor: batch done"`), "the batch under way ends after the API stopped")
	require.Less(t, at(`"msg":"processor: batch done"`), at(`"msg":"local: processor, counter consumer and sweeper stopped"`))
	require.Less(t, at(`"msg":"local: processor, counter consumer and sweeper stopped"`), at(`"msg":"local: stopped"`))
	require.Less(t, at(`"msg":"local: stopped"`), at("run: stopped"))

	// The task was delivered once and settled, by the batch that was under way.
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn})
	require.NoError(t, err)
	defer db.Close()
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	ev, err := store.Events.Get(context.Background(), created.ID)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, ev.State, "%+v", ev)
	mu.Lock()
	require.Equal(t, 1, deliveries)
	mu.Unlock()
}
