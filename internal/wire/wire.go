// Package wire builds the dependencies every entrypoint needs from a config.Config: the logger, the
// store, the SQS client, and the settings of the sweeper and of the processor's visibility
// extension, and the queue of local runs. It states no default of its own beyond what an unset
// variable means here (DB_MIGRATE, QUEUE_NAME); every other default is the configured component's.
package wire

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/secrets"
	"github.com/exactlyonce/exactlyonce/internal/sqsbatch"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
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
// overrides. It is loaded once per process (the environment and shared files are read at the first
// call) and shared by the database's IAM auth and the SQS client, which both need it at start-up.
var AWS = sync.OnceValues(func() (aws.Config, error) {
	return awsconfig.LoadDefaultConfig(context.Background())
})

// OpenStores opens the database, migrates it unless DB_MIGRATE is false (unset: it migrates), and
// returns the process's stores, built on one core handle.
func OpenStores(ctx context.Context, c config.Config) (*Stores, error) {
	db, err := OpenDB(ctx, c)
	if err != nil {
		return nil, err
	}
	return NewStores(db), nil
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

// StoreConfig returns the core handle's configured mysql.Config (ALLOCATOR, ALLOCATOR_BLOCK_SIZE).
func StoreConfig(c config.Store) mysql.Config {
	return mysql.Config{Allocator: c.Allocator, BlockSize: c.BlockSize}
}

// SQS returns an SQS client from the AWS configuration (AWS_ENDPOINT_URL_SQS, credentials, region),
// with the project's client options (queue.ClientOptions): retried attempts are logged to log.
func SQS(log *slog.Logger) (*sqs.Client, error) {
	awsCfg, err := AWS()
	if err != nil {
		return nil, err
	}
	return queue.NewClient(awsCfg, log), nil
}

// Sweeping returns the configured sweeping.Config, logging to log (nil: sweeping's default).
func Sweeping(c config.Config, log *slog.Logger) sweeping.Config {
	sc := sweeping.Config{BatchSize: c.Sweep.BatchSize, Logger: log, Shards: c.Sweep.Shards, Agent: AgentVars(c.Agent),
		WorkerMaxReferences: c.Webhook.WorkerMaxReferences, WorkerRetention: c.Webhook.WorkerRetention}
	if g := c.Sweep.Grace; g != nil {
		// sweeping.Config.Grace takes zero for its default and a negative value for no grace.
		sc.Grace = *g
		if *g == 0 {
			sc.Grace = -1
		}
	}
	return sc
}

// Agent returns the configured agents.Config for an agent of kind, logging to log: AGENT_* and
// SHARDS_* for its membership and loop (AgentVars), a name made of kind, process id and host when
// AGENT_NAME is unset, and SWEEP_GRACE for the pending events it leaves to the queue path (unset:
// the sweeper's default grace). With several shards in SHARDS_ASSIGNED it is the first one's: Agents
// gives one per shard.
func Agent(c config.Config, kind string, log *slog.Logger) agents.Config {
	return Agents(c, kind, log)[0]
}

// Agents returns the agents a process runs: one per shard SHARDS_ASSIGNED lists, as a Hibernate
// Search node runs one event processor per assigned shard, each its own member of the agents table
// (named with its shard when there are several); or the one dynamic agent. Each is configured as
// Agent says.
func Agents(c config.Config, kind string, log *slog.Logger) []agents.Config {
	base := AgentVars(c.Agent)
	if base.Member.Name == "" {
		host, _ := os.Hostname()
		base.Member.Name = fmt.Sprintf("%s-%d-%s", kind, os.Getpid(), host)
	}
	base.Member.Kind, base.Member.Logger = kind, log
	base.Grace = sweeping.DefaultGrace
	if g := c.Sweep.Grace; g != nil {
		base.Grace = *g
	}
	assigned := c.Agent.ShardsAssigned
	if len(assigned) <= 1 {
		return []agents.Config{base}
	}
	out := make([]agents.Config, len(assigned))
	for i, shard := range assigned {
		ac := base
		ac.Member.Static = &agents.Shard{Total: *c.Agent.ShardsTotal, Index: shard}
		ac.Member.Name = fmt.Sprintf("%s-shard%d", base.Member.Name, shard)
		out[i] = ac
	}
	return out
}

// AgentVars returns the agents.Config that AGENT_* and SHARDS_* set, and nothing else: zero where
// they are unset, for agents' defaults. With several shards in SHARDS_ASSIGNED, the first one's.
func AgentVars(a config.Agent) agents.Config {
	ac := agents.Config{
		Member:       agents.MemberConfig{Name: a.Name, PulseInterval: a.PulseInterval, Expiration: a.Expiration},
		BatchSize:    a.BatchSize,
		PollInterval: a.PollInterval,
		PollJitter:   a.PollInterval / 2,
	}
	if a.ShardsTotal != nil && len(a.ShardsAssigned) > 0 {
		ac.Member.Static = &agents.Shard{Total: *a.ShardsTotal, Index: a.ShardsAssigned[0]}
	}
	return ac
}

// Visibility returns the processor's visibility extension on client, for QUEUE_URL (empty: each
// record's eventSourceARN names the queue), with the configured heartbeat and extension.
func Visibility(c config.Config, client *sqs.Client) *sqsbatch.Visibility {
	return &sqsbatch.Visibility{Client: client, QueueURL: c.QueueURL,
		Heartbeat: c.Processor.VisibilityHeartbeat, Extension: c.Processor.VisibilityExtension}
}

// LocalQueue is the queue a local run creates if it is missing (cmd/local, cmd/invoke): named name
// (QUEUE_NAME; empty: "events"), with its <name>-dlq: a 30 s visibility timeout, and redrive to
// the DLQ after 5 receives, as deployed (infra/tuning.go).
func LocalQueue(name string) queue.QueueSpec {
	return queue.QueueSpec{Name: cmp.Or(name, "events"), VisibilityTimeout: 30, MaxReceiveCount: 5}
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

// Tasks returns how this process delivers tasks: the webhook client, signed with WEBHOOK_SECRET or
// with the secret WEBHOOK_SECRET_ARN names (read from Secrets Manager once), and the retry and
// timeout settings. With neither variable set it returns nil and logs a warning: the process then
// claims no task, and tasks wait for a process that can sign them.
func Tasks(ctx context.Context, c config.Config, log *slog.Logger) (*processing.Tasks, error) {
	w := c.Webhook
	secret := w.Secret
	if w.SecretARN != "" {
		var err error
		if secret, err = secrets.Resolve(ctx, w.SecretARN); err != nil {
			return nil, fmt.Errorf("WEBHOOK_SECRET_ARN: %w", err)
		}
	}
	if secret == "" {
		log.Warn("neither WEBHOOK_SECRET nor WEBHOOK_SECRET_ARN is set: this process delivers no task")
		return nil, nil
	}
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		return nil, fmt.Errorf("webhook signing secret: %w", err)
	}
	if w.AllowLoopback {
		log.Warn("WEBHOOK_ALLOW_LOOPBACK=true: tasks may be delivered to 127.0.0.0/8 and ::1 (local runs only)")
	}
	p := WebhookPolicy(c)
	client := webhook.New(webhook.Config{Key: key, Timeout: w.Timeout, AllowLoopback: p.AllowLoopback,
		AllowPrivate: p.AllowPrivate})
	return &processing.Tasks{Deliverer: client, RetryBase: w.RetryBase, RetryMax: w.RetryMax, Timeout: w.Timeout}, nil
}

// WebhookPolicy is the deliveries' address rule (WEBHOOK_ALLOW_LOOPBACK, WEBHOOK_ALLOW_PRIVATE): what
// the deliverers Tasks builds dial, and what the API accepts in a task's url (api.Server.Webhook).
func WebhookPolicy(c config.Config) webhook.Policy {
	return webhook.Policy{AllowLoopback: c.Webhook.AllowLoopback, AllowPrivate: c.Webhook.AllowPrivate}
}

// EventService returns an agent's EventService (WORKER_MAX_REFERENCES, WORKER_RETENTION): each
// agent gets its own, and agents.New ties it to the agent's id.
func EventService(store processing.WorkerStore, c config.Config, log *slog.Logger) *processing.EventService {
	return &processing.EventService{Store: store, MaxReferences: c.Webhook.WorkerMaxReferences,
		Retention: c.Webhook.WorkerRetention, Logger: log}
}

// ProcessorWorkers gives processor p (and returns it), when it delivers tasks, an EventService of
// its own and its registration as an agent without a range (kind "processor"; AGENT_NAME,
// AGENT_PULSE_INTERVAL and AGENT_EXPIRATION apply): the tasks it delivers join event workers as
// the agents' do. Its name is the Lambda container's log stream when there is one, else
// processor-<pid>-<host>.
func ProcessorWorkers(p *processing.Processor, stores *Stores, c config.Config, log *slog.Logger) (*processing.Processor, error) {
	if p.Tasks == nil {
		return p, nil
	}
	mc := AgentVars(c.Agent).Member
	mc.Kind, mc.Logger = "processor", log
	if mc.Name == "" {
		mc.Name = os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME")
	}
	if mc.Name == "" {
		host, _ := os.Hostname()
		mc.Name = fmt.Sprintf("processor-%d-%s", os.Getpid(), host)
	}
	return p, agents.WithEventWorkers(p, stores.Agents, EventService(stores.Agents, c, log), mc)
}
