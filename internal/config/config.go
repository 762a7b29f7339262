// Package config reads the configuration every entrypoint shares from the environment, once, with
// defaults and validation, and builds the dependencies from it. docs/contract.md and the README
// list the variables.
package config

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
)

// Config is the configuration of one process.
type Config struct {
	// DB says how to reach the database (DB_DSN, or DB_HOST/DB_PORT/DB_NAME/DB_USER/DB_PASSWORD,
	// DB_IAM_AUTH, DB_TLS, DB_MAX_OPEN_CONNS).
	DB mysql.ConnConfig
	// Migrate applies the embedded schema at start (DB_MIGRATE, default true).
	Migrate bool
	// Store picks the id allocator (ALLOCATOR, ALLOCATOR_BLOCK_SIZE).
	Store mysql.StoreConfig
	// QueueURL is where POST /events/async sends messages (QUEUE_URL). Empty: async events are left
	// to the sweeper.
	QueueURL string
	// SweepBatchSize and SweepGrace tune the sweeper (SWEEP_BATCH_SIZE, default 500; SWEEP_GRACE,
	// default 10s). 500 drained 100,000 pending events about 1.5x faster than 100 here
	// (docs/performance.md); the statements stay under RDS Proxy's 16 KB pinning limit because the
	// store writes a batch in chunks.
	SweepBatchSize int
	SweepGrace     time.Duration
	// LogLevel is LOG_LEVEL: debug, info (default), warn or error.
	LogLevel slog.Level
}

// Load reads the configuration with getenv (os.Getenv in production).
func Load(getenv func(string) string) (Config, error) {
	var errs []string
	str := func(k, def string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		return def
	}
	integer := func(k string, def, min int) int {
		v := str(k, "")
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < min {
			errs = append(errs, fmt.Sprintf("%s must be an integer >= %d, got %q", k, min, v))
			return def
		}
		return n
	}
	boolean := func(k string, def bool) bool {
		v := str(k, "")
		if v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s must be true or false, got %q", k, v))
			return def
		}
		return b
	}
	duration := func(k string, def time.Duration) time.Duration {
		v := str(k, "")
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Sprintf("%s must be a duration such as 10s, got %q", k, v))
			return def
		}
		return d
	}

	c := Config{
		DB: mysql.ConnConfig{
			DSN:          str("DB_DSN", ""),
			Host:         str("DB_HOST", ""),
			Port:         integer("DB_PORT", 3306, 1),
			Name:         str("DB_NAME", "events"),
			User:         str("DB_USER", ""),
			Password:     str("DB_PASSWORD", ""),
			IAMAuth:      boolean("DB_IAM_AUTH", false),
			TLS:          boolean("DB_TLS", false),
			Region:       str("AWS_REGION", str("AWS_DEFAULT_REGION", "")),
			MaxOpenConns: integer("DB_MAX_OPEN_CONNS", 4, 1),
		},
		Migrate: boolean("DB_MIGRATE", true),
		Store: mysql.StoreConfig{
			Allocator: str("ALLOCATOR", mysql.DefaultAllocator),
			BlockSize: integer("ALLOCATOR_BLOCK_SIZE", mysql.DefaultBlockSize, 1),
		},
		QueueURL:       str("QUEUE_URL", ""),
		SweepBatchSize: integer("SWEEP_BATCH_SIZE", sweeping.DefaultBatchSize, 1),
		SweepGrace:     duration("SWEEP_GRACE", 10*time.Second),
	}
	if c.DB.DSN == "" && (c.DB.Host == "" || c.DB.User == "") {
		errs = append(errs, "set DB_DSN, or DB_HOST and DB_USER")
	}
	if a := c.Store.Allocator; a != mysql.AllocatorBlock && a != mysql.AllocatorLiteral {
		errs = append(errs, fmt.Sprintf("ALLOCATOR must be %q or %q, got %q", mysql.AllocatorBlock, mysql.AllocatorLiteral, a))
	}
	if err := c.LogLevel.UnmarshalText([]byte(str("LOG_LEVEL", "info"))); err != nil {
		errs = append(errs, fmt.Sprintf("LOG_LEVEL must be debug, info, warn or error, got %q", getenv("LOG_LEVEL")))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("configuration: %s", strings.Join(errs, "; "))
	}
	return c, nil
}

// Logger returns the process's JSON logger on stdout (CloudWatch parses it as structured logs).
func (c Config) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: c.LogLevel}))
}

// AWS returns the SDK's configuration: region, credentials and the standard AWS_ENDPOINT_URL*
// overrides. It is loaded once per process (the environment and shared files are read at the first
// call) and shared by the database's IAM auth and the SQS client, which both need it at start-up.
var AWS = sync.OnceValues(func() (aws.Config, error) {
	return awsconfig.LoadDefaultConfig(context.Background())
})

// OpenStore opens the database, migrates it if configured to, and returns the store.
func (c Config) OpenStore(ctx context.Context) (*mysql.Store, error) {
	dbc := c.DB
	if dbc.IAMAuth {
		awsCfg, err := AWS()
		if err != nil {
			return nil, fmt.Errorf("AWS configuration for IAM database auth: %w", err)
		}
		dbc.Credentials = awsCfg.Credentials
		if dbc.Region == "" {
			dbc.Region = awsCfg.Region
		}
	}
	db, err := mysql.Open(dbc)
	if err != nil {
		return nil, err
	}
	if c.Migrate {
		if err := mysql.Migrate(ctx, db); err != nil {
			db.Close()
			return nil, err
		}
	}
	store, err := mysql.NewStore(db, c.Store)
	if err != nil {
		db.Close()
		return nil, err
	}
	return store, nil
}

// SQSIdleConns is how many idle connections to the SQS endpoint a process keeps. The SDK keeps 10
// per host: a process with more concurrent senders and pollers than that (the local runner) opens
// and closes a connection for most calls. Measured against goaws with 16 concurrent senders: about
// 2,600 sends/s with the SDK's default, 4,300 with this (docs/performance.md).
const SQSIdleConns = 64

// SQSHTTPClient is the HTTP client of every SQS client: the SDK's, keeping SQSIdleConns idle
// connections per host, with each request body wrapped by requestBody.
func SQSHTTPClient() aws.HTTPClient {
	return bodyWrapping{awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = max(t.MaxIdleConns, SQSIdleConns)
		t.MaxIdleConnsPerHost = SQSIdleConns
	})}
}

// bodyWrapping hands every request to next with its body wrapped by requestBody.
type bodyWrapping struct{ next aws.HTTPClient }

func (c bodyWrapping) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = requestBody{r.Body}
	}
	return c.next.Do(r)
}

// requestBody is a request body with Read and Close only, hiding the WriteTo of the SDK's body.
//
// Why: net/http's transport, once it has written a body of known length, reads it once more to
// check that nothing is left (io.Copy(io.Discard, body), in its connection's write loop). The SDK
// closes the body as soon as the response headers are back, and its body's WriteTo, called after
// that close, returns io.EOF as an error (smithy-go, transport/http/internal/io/safe.go); io.Copy
// passes that on. When the response beats the write loop to that last read, which a fast server
// and a busy core make common, the transport takes the error for a failed write and closes the
// connection, under the response body still being read: "failed to decode response body ... use
// of closed network connection", and the SDK retries. A retried ReceiveMessage leaves the messages
// of the lost answer invisible for the visibility timeout; a retried SendMessage sends twice.
// Read after the close returns io.EOF with no error to io.Copy, so the check passes, as it should.
// Measured against goaws, 2 senders and 4 pollers for 45 s, twice each way: without this, 576-672
// connections opened and 33-55 attempts retried (and more messages received than sent); with it,
// 5-6 connections and no retry (docs/performance.md).
type requestBody struct{ io.ReadCloser }

// SQS returns an SQS client, honouring AWS_ENDPOINT_URL_SQS / AWS_ENDPOINT_URL. Retried attempts
// are logged to log (SQSRetryer).
func SQS(log *slog.Logger) (*sqs.Client, error) {
	awsCfg, err := AWS()
	if err != nil {
		return nil, err
	}
	return sqs.NewFromConfig(awsCfg, SQSOptions(log)), nil
}

// SQSOptions gives an SQS client what every SQS client of the project has, the product's, the
// bench's and the tests': SQSHTTPClient, and SQSRetryer logging to log.
func SQSOptions(log *slog.Logger) func(*sqs.Options) {
	return func(o *sqs.Options) {
		o.HTTPClient = SQSHTTPClient()
		o.Retryer = SQSRetryer(log)
	}
}

// SQSRetryer is the SDK's standard retryer, logging why each retried attempt failed. The SDK says
// only that it retries, and a retried call can have side effects that the caller never sees: a
// ReceiveMessage whose answer was lost has made its messages invisible for the visibility timeout.
func SQSRetryer(log *slog.Logger) aws.RetryerV2 {
	return loggingRetryer{RetryerV2: retry.NewStandard(), log: log}
}

type loggingRetryer struct {
	aws.RetryerV2
	log *slog.Logger
}

// GetRetryToken is asked for once per attempt that failed and will be retried, with the
// operation's context.
func (r loggingRetryer) GetRetryToken(ctx context.Context, opErr error) (func(error) error, error) {
	r.log.Warn("sqs: attempt failed; retrying", "operation", awsmiddleware.GetOperationName(ctx), "err", opErr)
	return r.RetryerV2.GetRetryToken(ctx, opErr)
}

// Must logs err and exits. For entrypoints, before any handler runs: a Lambda whose init fails is
// reported by the runtime as an init error and retried on the next invocation.
func Must[T any](v T, err error) T {
	if err != nil {
		slog.Error("startup failed", "err", err)
		os.Exit(1)
	}
	return v
}
