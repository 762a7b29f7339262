// Package wire builds every process from a config.Config, once: the logger, the stores, the SQS
// client, the settings of each component, and each process's assembly (assembly.go: the API, the
// processor, the sweeper and standalone agents, the counter consumer), which the functions, the
// commands, the local runner, the chaos run and the benchmark use. It passes every setting as
// internal/config reads it (config's package doc states the one convention), and states no default
// of its own beyond what an unset variable means here (DB_MIGRATE, QUEUE_NAME, ASYNC_LINGER for a
// long-running API); every other default is the configured component's. What delivers tasks (the
// webhook client and its signing secret, the sweeper's configuration, the standalone agents) is in
// internal/wire/delivery, so that the processes that deliver none do not link Secrets Manager.
package wire

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/archive"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire/boot"
)

// Logger returns the process's JSON logger on stdout at LOG_LEVEL (boot.Logger).
func Logger(c config.Config) *slog.Logger { return boot.Logger(c) }

// NewLogger returns Logger's JSON logger writing to w at level (boot.NewLogger).
func NewLogger(w io.Writer, level slog.Level) *slog.Logger { return boot.NewLogger(w, level) }

// AWS returns the SDK's configuration, loaded once per process (boot.AWS).
var AWS = boot.AWS

// Environment is a function's configuration, its AWS settings checked in a Lambda build (boot.Environment).
func Environment() (config.Config, error) { return boot.Environment() }

// OpenStores opens the database, migrates it unless DB_MIGRATE is false (unset: it migrates), and
// returns the process's stores, built on one core handle.
func OpenStores(ctx context.Context, c config.Config) (*Stores, error) {
	db, err := OpenDB(ctx, c)
	if err != nil {
		return nil, err
	}
	a, err := Archive(c.History)
	if err != nil {
		db.Pool().Close()
		return nil, err
	}
	return NewStores(db).WithArchive(a), nil
}

// Archive returns the packed history's archive in HISTORY_BUCKET, through the AWS SDK's S3 client
// (AWS_ENDPOINT_URL_S3 locally), or nil when no bucket is set. The client is built at the archive's
// first call to S3 (archive.OnFirstUse), not at start-up: a function's cold start does not pay for
// it, as most of its invocations read no archived page, and an AWS configuration that cannot be
// loaded is then that call's error (a 503 for a read), not start-up's.
func Archive(c config.History) (pagestore.Archive, error) {
	if c.Bucket == "" {
		return nil, nil
	}
	return archive.OnFirstUse(func() (*s3.Client, error) {
		awsCfg, err := AWS()
		if err != nil {
			return nil, fmt.Errorf("AWS configuration for HISTORY_BUCKET: %w", err)
		}
		return archive.NewClient(awsCfg), nil
	}, c.Bucket, 0), nil
}

// OpenDB opens the database, migrates it unless DB_MIGRATE is false, and returns the core handle
// (boot.OpenDB).
func OpenDB(ctx context.Context, c config.Config) (*mysql.DB, error) { return boot.OpenDB(ctx, c) }

// Conn returns the mysql.ConnConfig of the configured database (boot.Conn).
func Conn(c config.DB) mysql.ConnConfig { return boot.Conn(c) }

// StoreConfig returns the core handle's configured mysql.Config (boot.StoreConfig).
func StoreConfig(c config.Store) mysql.Config { return boot.StoreConfig(c) }

// SQS returns an SQS client from the AWS configuration (AWS_ENDPOINT_URL_SQS, credentials, region),
// with the project's client options (queue.ClientOptions): retried attempts are logged to log.
func SQS(log *slog.Logger) (*sqs.Client, error) {
	awsCfg, err := AWS()
	if err != nil {
		return nil, err
	}
	return queue.NewClient(awsCfg, log), nil
}

// SQSOnFirstUse is SQS's client built at its first call (queue.LazyClient), for a function whose
// first invocation seldom calls SQS: its cold start does not load the AWS configuration for it or
// build the client. A configuration that cannot be loaded is then the calls' error, not init's.
func SQSOnFirstUse(log *slog.Logger) *queue.LazyClient {
	return queue.OnFirstUse(func() (*sqs.Client, error) { return SQS(log) })
}

// Visibility returns the processor's visibility extension on client, for QUEUE_URL (empty: each
// record's eventSourceARN names the queue), with the configured heartbeat and extension.
func Visibility(c config.Config, client sqsbatch.VisibilityClient) *sqsbatch.Visibility {
	return &sqsbatch.Visibility{Client: client, QueueURL: c.QueueURL,
		Heartbeat: c.Processor.VisibilityHeartbeat, Extension: c.Processor.VisibilityExtension}
}

// LocalQueue is the queue a local run creates if it is missing (cmd/local, cmd/invoke): named name
// (QUEUE_NAME; empty: "events"), with its <name>-dlq: a 30 s visibility timeout, and redrive to
// the DLQ after 5 receives, as deployed (infra/tuning.go).
func LocalQueue(name string) queue.QueueSpec {
	return queue.QueueSpec{Name: cmp.Or(name, "events"), VisibilityTimeout: 30, MaxReceiveCount: 5}
}

// Must logs err and exits when err is not nil, else returns v (boot.Must).
func Must[T any](v T, err error) T { return boot.Must(v, err) }

// WebhookPolicy is the deliveries' address rule (WEBHOOK_ALLOW_LOOPBACK, WEBHOOK_ALLOW_PRIVATE, and
// the Lambda Runtime API and the system's own API, WEBHOOK_API_HOSTS, refused): what the deliverers
// delivery.Tasks builds dial, and what the API accepts in a task's url (api.Server.Webhook).
func WebhookPolicy(c config.Config) webhook.Policy {
	return webhook.Policy{AllowLoopback: c.Webhook.AllowLoopback, AllowPrivate: c.Webhook.AllowPrivate,
		LambdaRuntimeAPI: c.Webhook.LambdaRuntimeAPI, OwnHosts: c.Webhook.APIHosts}
}
