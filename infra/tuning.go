package infra

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
)

// The numbers that shape the stack, in one place. docs/deploy.md ("Design decisions") explains each;
// the tests read these constants so a change here is a change of the asserted template too.

// Lambda timeouts and memory. 256 MB gives a Go binary ample heap and a proportionate CPU share;
// these functions wait on the database, not on CPU.
const (
	apiTimeout       = 10 * time.Second // API Gateway's own limit is 29 s; a request that needs more is broken.
	processorTimeout = 30 * time.Second // a batch of batchSize events, each one short transaction.
	// One scheduled tick and the hand-over: each invocation is an agent for its whole duration
	// (docs/deploy.md, "The sweepers are agents"); it overlaps the next tick's by sweeperTimeout -
	// sweepRate, during which the next one waits for it to leave. Under 2 sweepRates: at most two
	// invocations of a shard at once.
	sweeperTimeout   = 75 * time.Second
	migrateTimeout   = 5 * time.Minute // first deploy: waits for the proxy target to become available.
	triggerTimeout   = migrateTimeout + time.Minute
	functionMemoryMB = 256
)

// Connection pool per execution environment (DB_MAX_OPEN_CONNS). One environment serves one
// invocation at a time, so the api needs few, and so does the sweeper (below); the processor keeps
// the contract's default (4).
const (
	apiMaxOpenConns       = 2
	processorMaxOpenConns = 4
	sweeperMaxOpenConns   = 2 // an agent's loop runs one statement at a time: pulse or batch
	migrateMaxOpenConns   = 2
)

// Queue and event source mapping.
const (
	visibilityTimeout    = 6 * processorTimeout // AWS guidance: at least 6x the function timeout.
	maxReceiveCount      = 5                    // AWS guidance: at least 5 before the DLQ.
	queueRetention       = 4 * 24 * time.Hour
	dlqRetention         = 14 * 24 * time.Hour // the SQS maximum: time to investigate and redrive.
	batchSize            = 10
	maxBatchingWindow    = 1 * time.Second
	processorConcurrency = 5 // ScalingConfig.MaximumConcurrency (minimum allowed is 2).
)

// Sweeper schedule: rate(1 minute) is the shortest rate() expression EventBridge accepts.
const sweepRate = 1 * time.Minute

// Sweeper agents (SWEEPER_SHARDS): how many run at once, each on its static shard of the hash
// space with a rule of its own. Two: the sweeping of a large backlog is split, and a shard whose
// invocation dies is one of two. At most maxSweeperShards: each holds up to sweeperMaxOpenConns
// connections, twice during a hand-over.
const (
	defaultSweeperShards = 2
	maxSweeperShards     = 8
	// sweepingAgentStopBefore is how long before its deadline an invocation leaves
	// (internal/sweeping.DefaultAgentStopBefore): the ticks must overlap by more.
	sweepingAgentStopBefore = 8 * time.Second
)

// Webhook delivery (processor and sweeper; docs/deploy.md, "Webhook delivery").
const (
	// webhookTimeout is WEBHOOK_TIMEOUT: one delivery's whole HTTP exchange, connect to last byte.
	webhookTimeout = 10 * time.Second
	// deliveryMargin is what a delivery needs besides its HTTP exchange: claiming before it and
	// settling after it (each a short transaction, behind proxyBorrowTimeout at worst), and leaving
	// before the invocation's deadline. An invocation must hold webhookTimeout + deliveryMargin.
	deliveryMargin = 10 * time.Second
	// processingLease is internal/processing.DefaultLease: how long a claimed task is held before
	// another worker may claim it. An invocation must end before its claims' leases do, or a second
	// worker would deliver a task the first is still delivering.
	processingLease = 2 * time.Minute
	// defaultNatGateways is the NatGateways setting's default: one, in the first AZ. The database has
	// one writer, in one AZ, so a second NAT gateway buys little availability for its $36.50 a month.
	defaultNatGateways = 1
)

// Aurora Serverless v2 capacity range and RDS Proxy pool settings.
const (
	minACU                = 0.5 // auto-pause (0 ACU) cannot work with RDS Proxy and a per-minute sweeper.
	maxACU                = 4   // max_connections is derived from the maximum ACU (about 135 at 4 ACU).
	proxyMaxConnsPercent  = 90  // leave 10% of max_connections for administration.
	proxyBorrowTimeout    = 5 * time.Second
	lockWaitTimeoutSecs   = 5
	backupRetentionDays   = 7
	databaseName          = "events"
	databaseAdminUsername = "admin"
	databasePort          = 3306
)

// Database users, one per function (docs/deploy.md, "Database users"): only migrate connects as
// databaseAdminUsername, and it creates these (DB_FUNCTION_USERS), each with only the privileges
// its function's work needs (internal/mysql/users.sql). They sign in with IAM, end to end.
const (
	databaseAPIUser       = "exactlyonce_api"
	databaseProcessorUser = "exactlyonce_processor"
	databaseSweeperUser   = "exactlyonce_sweeper"
)

// API Gateway stage throttling (requests per second, steady and burst).
const (
	apiRateLimit  = 50
	apiBurstLimit = 100
)

// Log retention for every log group the stack creates (functions, API access, flow log, database).
var logRetention = awslogs.RetentionDays_ONE_MONTH

const logRetentionDays = 30 // what logRetention means in the template (RetentionInDays)

// Alarm thresholds.
const (
	queueAgeAlarmSeconds = 300  // a healthy queue drains in seconds; 5 minutes means the processor is stuck.
	api5xxRateThreshold  = 0.05 // 5% of requests over 5 minutes.
)
