package client_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/client"
	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// signingKey signs the stack's webhook deliveries; signingSecret is the receivers' form of it.
var signingKey = []byte("client-test-signing-key-0123456789abcdef")

func signingSecret() string { return "whsec_" + base64.StdEncoding.EncodeToString(signingKey) }

// stack is the local system (local.Start: the API, the processor, the sweeper's agent) on a scratch
// database reached through a fault proxy, every exchange with its API checked against openapi.yaml.
type stack struct {
	url    string
	direct *sql.DB      // the database, not through the proxy: the test's reads
	proxy  *fault.Proxy // between the API and the database
	// cutAfterCommit, while positive, makes the API's next keyed create run to its end (its event
	// and key committed) and then close the connection without answering; it counts down.
	cutAfterCommit atomic.Int32
	// keyedCreates counts the creates each Idempotency-Key reached the API with.
	mu           sync.Mutex
	keyedCreates map[string]int
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startStack(t *testing.T) *stack {
	t.Helper()
	direct, dsn := testdb.DB(t, 4)
	cfg, err := drv.ParseDSN(dsn)
	require.NoError(t, err)
	s := &stack{direct: direct, proxy: fault.StartProxy(t, cfg.Addr), keyedCreates: map[string]int{}}
	db, err := mysql.Open(mysql.ConnConfig{DSN: s.proxy.DSN(dsn), MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	sqsClient := localsqs.Client(t)
	q := localsqs.Queues(t, sqsClient, 30, 5)
	tasks := &processing.Tasks{Deliverer: webhook.New(webhook.Config{Key: signingKey, AllowLoopback: true, Timeout: 5 * time.Second}),
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := local.Start(ctx, store, sqsClient, local.Options{HTTPAddr: "127.0.0.1:0", Queues: q,
		WrapAPI:       func(h http.Handler) http.Handler { return s.wrap(openapitest.Handler(t, h)) },
		SweepInterval: 100 * time.Millisecond, Engine: processing.Engine{Tasks: tasks},
		Sweep: sweeping.Config{Logger: quiet()}, Webhook: webhook.Policy{AllowLoopback: true}}, quiet())
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sys.Wait())
	})
	s.url = sys.URL
	return s
}

// wrap counts keyed creates and, when armed, cuts the connection of one after the API committed it.
func (s *stack) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" || r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		s.mu.Lock()
		s.keyedCreates[key]++
		s.mu.Unlock()
		if s.cutAfterCommit.Add(-1) < 0 {
			s.cutAfterCommit.Add(1)
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r) // the create commits; its answer is never sent
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	})
}

func (s *stack) creates(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keyedCreates[key]
}

// events counts the events stored, straight from the table.
func (s *stack) events(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, s.direct.QueryRow("SELECT COUNT(*) FROM events").Scan(&n))
	return n
}

func (s *stack) client(t *testing.T, retry client.Retry) *client.Client {
	t.Helper()
	c, err := client.New(s.url, client.Options{Retry: retry,
		HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: openapitest.Transport(t, nil)}})
	require.NoError(t, err)
	return c
}
