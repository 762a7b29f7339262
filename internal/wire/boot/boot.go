// Package boot is what every function's bootstrap needs before it builds anything, and nothing
// more: the logger, Must for start-up errors, the AWS SDK's configuration, and the database handle
// (opened, migrated unless DB_MIGRATE is false) with the errors that name a missing database.
// internal/wire builds every process on it; a function that needs no more (the migrate function)
// imports this package alone, so that its bootstrap does not link, and initialise at every cold
// start, the SQS, S3 and Secrets Manager clients and the components it never runs.
package boot

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/exactlyonce/exactlyonce/internal/awsenv"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// Logger returns the process's JSON logger on stdout at LOG_LEVEL (CloudWatch parses it as
// structured logs). On Lambda each line carries the invocation's request id (requestId; see
// Invocation).
func Logger(c config.Config) *slog.Logger { return NewLogger(os.Stdout, c.LogLevel) }

// NewLogger returns Logger's JSON logger writing to w at level.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(requestIDHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})})
}

// AWS returns the SDK's configuration: region, credentials and the standard AWS_ENDPOINT_URL*
// overrides. It is loaded once per process (awsenv.Load: config.LoadDefaultConfig, or in a Lambda
// bootstrap Lambda's own, which does not link the credential chain's STS, SSO and sign-in clients),
// at the first call, and shared by every client of the process and the database's IAM auth.
var AWS = sync.OnceValues(func() (aws.Config, error) {
	return awsenv.Load(context.Background())
})

// Environment is the process's configuration (config.LoadEnviron) for a function's bootstrap: in a
// Lambda build its AWS settings are checked too (awsenv.Check), so that a setting Lambda's AWS
// configuration does not read fails the init, named, rather than being ignored.
func Environment() (config.Config, error) {
	c, err := config.LoadEnviron()
	if err != nil {
		return c, err
	}
	return c, awsenv.Check()
}

// OpenDB opens the database, migrates it unless DB_MIGRATE is false (unset: it migrates), and returns
// the core handle, with the configured allocator (OpenStores builds the stores on it).
func OpenDB(ctx context.Context, c config.Config) (*mysql.DB, error) {
	conn := Conn(c.DB)
	if conn.IAMAuth {
		awsCfg, err := AWS()
		if err != nil {
			return nil, fmt.Errorf("AWS configuration for IAM database auth: %w", err)
		}
		conn.Credentials = awsCfg.Credentials
		conn.Region = cmp.Or(conn.Region, awsCfg.Region)
	}
	db, err := mysql.Open(conn)
	if err != nil {
		return nil, err
	}
	if c.DB.Migrate == nil || *c.DB.Migrate {
		if err := mysql.Migrate(ctx, db); err != nil {
			db.Close()
			return nil, DatabaseError(c.DB, err)
		}
	}
	core, err := mysql.New(db, StoreConfig(c.Store))
	if err != nil {
		db.Close()
		return nil, err
	}
	return core, nil
}

// Conn returns the mysql.ConnConfig of the configured database, without AWS credentials
// (OpenDB adds them for IAM auth).
func Conn(c config.DB) mysql.ConnConfig {
	return mysql.ConnConfig{DSN: c.DSN, Host: c.Host, Port: c.Port, Name: c.Name, User: c.User,
		Password: c.Password, IAMAuth: c.IAMAuth, TLS: c.TLS, Region: c.Region, MaxOpenConns: c.MaxOpenConns}
}

// StoreConfig returns the core handle's configured mysql.Config (ALLOCATOR, ALLOCATOR_BLOCK_SIZE,
// ALLOCATOR_BLOCK_MAX_AGE).
func StoreConfig(c config.Store) mysql.Config {
	return mysql.Config{Allocator: c.Allocator, BlockSize: c.BlockSize, BlockMaxAge: c.BlockMaxAge}
}

// Must logs err as one JSON line on stdout, like every other log line (Logger; the configuration,
// and so LOG_LEVEL, may be what failed), and exits with status 1. For entrypoints, before any
// handler runs: a Lambda whose init fails is reported by the runtime as an init error and retried
// on the next invocation.
func Must[T any](v T, err error) T {
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stdout, nil)).Error("startup failed", "err", err)
		os.Exit(1)
	}
	return v
}

// RequestID is the request id of the Lambda invocation under way, nil between invocations and
// outside Lambda (internal/wire's Invocation sets it).
var RequestID atomic.Pointer[string]

// requestIDHandler adds the Lambda invocation's request id (requestId) to every record: the one
// the record's context carries (lambdacontext), else the one of the invocation under way.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		r.AddAttrs(slog.String("requestId", lc.AwsRequestID))
	} else if id := RequestID.Load(); id != nil {
		r.AddAttrs(slog.String("requestId", *id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
