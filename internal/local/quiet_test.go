package local_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// records is a slog.Handler that keeps every record.
type records struct {
	mu  sync.Mutex
	all []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// lines returns the records at level or above, one line each.
func (r *records) lines(level slog.Level) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.all {
		if rec.Level >= level {
			line := rec.Level.String() + " " + rec.Message
			rec.Attrs(func(a slog.Attr) bool { line += fmt.Sprintf(" %s=%v", a.Key, a.Value); return true })
			out = append(out, line)
		}
	}
	return out
}

// A whole local run (API, processors delivering tasks under their agents, counter consumer,
// sweeper agent) with short pulses and expirations: a task is delivered, then the run idles for
// several expirations (its processors' agents expire and are ejected, as they pulse only during a
// batch), then a task is delivered again, and the run stops. Nothing is logged at WARN or above: an
// idle run is quiet. It logged a WARN per ejected processor and an ERROR per processor coming back.
func TestAnIdleRunIsQuiet(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := localsqs.Start("") // its own endpoint: the counter service's queues have fixed names
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	client := localsqs.NewClient(srv.URL)
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 12))
	rec := &records{}
	log := slog.New(rec)
	awsCfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")}
	counters, err := local.EnsureCounters(ctx, client, awsCfg, srv.URL, log)
	require.NoError(t, err)
	events, err := queue.Ensure(ctx, client, queue.QueueSpec{Name: "events", VisibilityTimeout: 30, MaxReceiveCount: 5})
	require.NoError(t, err)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(recv.Close)
	tasks := &processing.Tasks{Deliverer: webhook.New(webhook.Config{Key: []byte("local-quiet-test-signing-key-0123456789"),
		AllowLoopback: true, Timeout: 5 * time.Second})}
	const pulse, expiration = 200 * time.Millisecond, time.Second
	sys, err := local.Start(ctx, store, client, local.Options{HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, Queues: events, Counters: counters,
		Webhook: webhook.Policy{AllowLoopback: true}, // the receiver is on loopback
		Engine:  processing.Engine{Tasks: tasks}, Agent: agents.Config{Member: agents.MemberConfig{Name: "quiet",
			PulseInterval: pulse, Expiration: expiration}}}, log)
	require.NoError(t, err)

	deliver := func(ref string) {
		t.Helper()
		resp, err := http.Post(sys.URL+"/events/async", "application/json",
			strings.NewReader(fmt.Sprintf(`{"url":%q,"referenceId":%q}`, recv.URL, ref)))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		testutil.Eventually(t, 30*time.Second, "the task for "+ref+" processed", func() bool { return processedAll(t, store) })
	}
	processors := func() (n int, sweeper exactlyonce.Agent) {
		as, err := store.Agents.Agents(ctx)
		require.NoError(t, err)
		for _, a := range as {
			if a.Sharding == exactlyonce.ShardingNone {
				n++
			} else {
				sweeper = a
			}
		}
		return n, sweeper
	}
	deliver("before")
	n, _ := processors()
	require.Positive(t, n, "a processor registered its agent")
	// Idle: the processors' agents expire and are ejected, then three more expirations pass, counted
	// on the database's clock in the sweeper agent's pulses.
	testutil.Eventually(t, 30*time.Second, "the idle processors' agents ejected", func() bool { n, _ := processors(); return n == 0 })
	_, sweeper := processors()
	since := sweeper.LastPulseAt
	testutil.Eventually(t, 60*time.Second, "three expirations", func() bool {
		_, s := processors()
		return s.LastPulseAt.Sub(since) >= 3*expiration
	})
	deliver("after")
	cancel()
	require.NoError(t, sys.Wait())
	require.Empty(t, rec.lines(slog.LevelWarn), "an idle run logged at WARN or above")
	require.NotEmpty(t, rec.lines(slog.LevelDebug), "the log was captured")
}

// processedAll tells whether every event is processed (10, or 30 once the sweeper folded it into
// the count).
func processedAll(t *testing.T, store *wire.Stores) bool {
	t.Helper()
	var open int
	require.NoError(t, store.DB.Pool().QueryRow("SELECT COUNT(*) FROM events WHERE state NOT IN (10, 30)").Scan(&open))
	return open == 0
}
