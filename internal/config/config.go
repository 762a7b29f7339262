// Package config reads a process's configuration from the environment, once, into plain values
// (strings, numbers, booleans, durations), and validates it: any bad value is an error naming every
// bad variable. It imports no package of the application and states no default: the component a
// variable configures applies its own. internal/wire builds the dependencies from a Config. The
// README's "Configuration" lists the variables.
//
// One convention per setting, the same from here down to the component that applies the default
// (wire passes the values through, it does not translate them):
//
//   - A setting whose zero is not a meaningful value (a batch size, an interval, a timeout) is a
//     plain value: zero (unset) means the component's default.
//   - A setting whose zero is a meaningful value is a pointer: nil (unset) means the component's
//     default, and any value, zero included, means itself. These are SWEEP_GRACE (Sweep.Grace,
//     sweeping.Config.Grace; 0: no grace, default sweeping.DefaultGrace), ASYNC_LINGER
//     (Local.AsyncLinger, local.Options.AsyncLinger; 0: answer after the send, default
//     wire.DefaultAsyncLinger), MAPPING_CONCURRENCY (Local.MappingConcurrency,
//     local.Options.MappingConcurrency; 0: no queue consumer), HISTORY_RETENTION
//     (History.Retention, sweeping.Config.Retention; 0: archive every page as soon as it is
//     packed, default sweeping.DefaultRetention) and DB_MIGRATE (DB.Migrate; false: no migration). Below the component that applies the default, the value is resolved and zero
//     means zero (agents.Config.Grace, api.AsyncGroup.Linger).
package config

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/exactlyonce/exactlyonce"
)

// LocalServerDSN is the database server of local runs and tests: the MariaDB that
// `scripts/mariadb.sh ensure` (`make db`, `make run`, `make test`) provides, as the project's user,
// with no database named.
const LocalServerDSN = "exactlyonce:exactlyonce@tcp(127.0.0.1:3306)/"

// LocalDSN is the database of local runs (`make run`, cmd/invoke) on LocalServerDSN's server.
const LocalDSN = LocalServerDSN + "exactlyonce"

// Allocators are the values ALLOCATOR accepts: the names of internal/mysql's id allocators
// (mysql.AllocatorBlock and mysql.AllocatorLiteral; internal/wire's tests check that they agree).
func Allocators() []string { return []string{"block", "literal"} }

// LocalCounterQueues are the queues the local runner creates for the counter service
// (internal/local's counters.go), which QUEUE_NAME must not name.
func LocalCounterQueues() []string {
	return []string{"counters", "counters-dlq", "counter-results", "counter-results-dlq"}
}

// dbParts are the variables that name the database piece by piece, instead of DB_DSN.
var dbParts = []string{"DB_HOST", "DB_PORT", "DB_NAME", "DB_USER", "DB_PASSWORD"}

// MetricsOff is the METRICS_ADDR that serves no /metrics endpoint.
const MetricsOff = "off"

// The largest values of the numbers a component could not take larger: a value past one is
// refused at start like a malformed one, never a process that panics, runs out of memory or fails
// every request later, nor one silently taken as another value.
const (
	// MaxBlockSize bounds ALLOCATOR_BLOCK_SIZE: a block is reserved by adding it to the id counter,
	// a BIGINT (a block near its range made every create fail); a million ids a block is a thousand
	// times the default, and still 9 * 10^12 blocks.
	MaxBlockSize = 1_000_000
	// MaxBlockMaxAge bounds ALLOCATOR_BLOCK_MAX_AGE: a block's ids come later than the ids after
	// them by up to this much, and a late event holds its page of the packed history out of the
	// archive for a retention window after it (docs/history.md); a day is the longest the default
	// window (2h) makes sense with, and twelve times the largest window the docs suggest.
	MaxBlockMaxAge = 24 * time.Hour
	// MaxBatchSize bounds SWEEP_BATCH_SIZE and AGENT_BATCH_SIZE: a claim holds its events in memory
	// and their rows locked in one transaction (the claim's slice is made at its size: larger sizes
	// panicked or claimed for longer than a transaction may take). 20 times the sweeper's 500.
	MaxBatchSize = 10_000
	// MaxMappingBatchSize bounds MAPPING_BATCH_SIZE: SQS returns at most 10 messages a receive.
	MaxMappingBatchSize = 10
	// MaxMappingConcurrency bounds MAPPING_CONCURRENCY: a poller is a goroutine and a connection of
	// its own; AWS's event source mapping takes at most 1,000 (ScalingConfig's MaximumConcurrency).
	MaxMappingConcurrency = 1_000
	// MaxWorkerReferences bounds WORKER_MAX_REFERENCES: an event worker keeps its references in one
	// column of its row, read whole (and the count itself is an INT column). 100 times the default.
	MaxWorkerReferences = 10_000
	// MaxShards bounds SHARDS_TOTAL and SWEEPER_SHARDS: each shard is an agent that reads every
	// other agent at each pulse, and past 2^32 shards the ranges of the 32-bit hash space would be
	// empty (ShardRange gave each the whole space).
	MaxShards = 1_024
	// MaxAgentName bounds AGENT_NAME, in characters: the agents table's column.
	MaxAgentName = 64

	// MaxIdempotencyTTL bounds IDEMPOTENCY_TTL: a key's expiry is the database's clock plus the TTL
	// in whole seconds, as a 32-bit UNIX time (IDEMPOTENCY_TTL=2562047h made every keyed create a
	// 500); 30 days is 30 times the default and longer than any client retries a request.
	MaxIdempotencyTTL = 30 * 24 * time.Hour
	// MaxVisibility bounds VISIBILITY_HEARTBEAT and VISIBILITY_EXTENSION: SQS's visibility timeout
	// is at most 12 hours.
	MaxVisibility = 12 * time.Hour
	// MaxAgentInterval bounds AGENT_PULSE_INTERVAL, AGENT_EXPIRATION and AGENT_POLL_INTERVAL (and
	// SWEEP_INTERVAL, make run's name for its sweeper's poll interval): past a day an agent that died
	// holds its range for that long, or pulses or polls as rarely, which no deployment means; and
	// three pulse intervals must not overflow a duration.
	MaxAgentInterval = 24 * time.Hour
	// MaxSweepGrace bounds SWEEP_GRACE: the grace leaves a pending event to its queue message, and
	// SQS keeps a message at most 14 days, so a longer grace (SWEEP_GRACE=1000000h) left an event
	// whose message was lost pending for ever, the sweeper processing nothing.
	MaxSweepGrace = 14 * 24 * time.Hour
	// MaxWebhookTimeout bounds WEBHOOK_TIMEOUT: a delivery must end within its task's lease
	// (processing.DefaultLease, 2 minutes), less the 2 s its settlement is given, or another claim
	// may take the task and deliver it at the same moment; the engine cuts a delivery at its lease,
	// so a longer timeout would be silently taken as about two minutes. A minute and a half is nine
	// times the default.
	MaxWebhookTimeout = 90 * time.Second
	// MinAgentExpiration bounds AGENT_EXPIRATION from below (agents.MinExpiration, which says why):
	// AGENT_EXPIRATION=3ms with AGENT_PULSE_INTERVAL=1ms passed the 3-pulses rule, and the agent,
	// ejected at every look, kept every other dynamic agent WAITING for as long as it ran.
	MinAgentExpiration = time.Second
)

// Counter is where the counter service's notifications are published (wire.CounterPublisher): the
// SNS topic COUNTER_TOPIC_ARN (the stack sets it on the counter function and the sweeper), else the
// SQS queue COUNTER_RESULTS_URL, else nowhere (they wait, recorded, for a sweeper that publishes).
type Counter struct {
	TopicARN   string
	ResultsURL string
	// LocalTopic is COUNTER_TOPIC_LOCAL set to anything: the topic is goaws's, which publishes
	// one message a call (counters.LocalSNSBatch).
	LocalTopic bool
}

// Config is the configuration of one process. A zero field is a variable the environment does not
// set; the component the field configures gives it its default.
type Config struct {
	DB    DB
	Store Store
	// QueueURL is QUEUE_URL: the queue POST /events/async sends to (api function; empty: async
	// events are left to the sweeper), and whose messages the processor extends the visibility of
	// (empty: it derives the URL from each record's eventSourceARN).
	QueueURL  string
	Processor Processor
	Sweep     Sweep
	// Idempotency configures the API's Idempotency-Key header (api.Idempotency).
	Idempotency Idempotency
	Agent       Agent
	// Webhook configures the delivery of tasks (internal/webhook).
	Webhook Webhook
	// Counter is where the counter service's notifications go (wire.CounterPublisher).
	Counter Counter
	// History configures the archive of the packed history in S3 (docs/design.md, "The
	// archive").
	History History
	// LogLevel is LOG_LEVEL: debug, info, warn or error. Unset: slog's zero Level, info.
	LogLevel slog.Level
	// MetricsAddr is METRICS_ADDR: where a long-running process (cmd/local, cmd/agent) serves its
	// Prometheus metrics on /metrics, host:port, or "off". Unset: the process's default (cmd/local
	// 127.0.0.1:9464, cmd/agent none). The functions ignore it (they publish EMF lines).
	MetricsAddr string
	// Local is read by the local runner only.
	Local Local
}

// DB says how to reach the database, and whether to migrate it (mysql.ConnConfig; zero fields take
// its defaults).
type DB struct {
	// DSN is DB_DSN, a go-sql-driver/mysql DSN. It names the whole database: Load refuses DB_HOST,
	// DB_PORT, DB_NAME, DB_USER and DB_PASSWORD beside it, rather than ignoring them.
	DSN string
	// Host, Port, Name, User and Password are DB_HOST, DB_PORT, DB_NAME, DB_USER and DB_PASSWORD:
	// the database when DSN is empty (in AWS, the RDS Proxy endpoint). Host and User are required
	// then.
	Host     string
	Port     int
	Name     string
	User     string
	Password string
	// IAMAuth is DB_IAM_AUTH: authenticate with an IAM token built for each new connection; forces
	// TLS.
	IAMAuth bool
	// TLS is DB_TLS: TLS to the database with the system trust store.
	TLS bool
	// Region is AWS_REGION, or else AWS_DEFAULT_REGION: the region IAM tokens are signed for (empty:
	// the AWS configuration's).
	Region string
	// MaxOpenConns is DB_MAX_OPEN_CONNS: the connection pool's size per process.
	MaxOpenConns int
	// Migrate is DB_MIGRATE: whether opening the store applies the embedded schema. Nil: unset
	// (wire.OpenDB says what that means).
	Migrate *bool
}

// Store configures the stores' core handle (mysql.Config; zero fields take its defaults).
type Store struct {
	// Allocator is ALLOCATOR: one of Allocators().
	Allocator string
	// BlockSize is ALLOCATOR_BLOCK_SIZE: the ids the block allocator reserves per status-row
	// transaction.
	BlockSize int
	// BlockMaxAge is ALLOCATOR_BLOCK_MAX_AGE: how long after it reserved a block the block
	// allocator hands out its ids; the next create after that takes a fresh block.
	BlockMaxAge time.Duration
}

// Processor configures the processor's visibility extension for slow batches
// (sqsbatch.Visibility; zero fields take its defaults).
type Processor struct {
	// VisibilityHeartbeat is VISIBILITY_HEARTBEAT: how long after a batch starts, and then how
	// often, the processor extends the visibility of the batch's messages. Shorter than the queue's
	// visibility timeout.
	VisibilityHeartbeat time.Duration
	// VisibilityExtension is VISIBILITY_EXTENSION: the visibility timeout each extension sets,
	// counted from that moment. Longer than the heartbeat.
	VisibilityExtension time.Duration
}

// Sweep configures the sweeper (sweeping.Config, through wire.Sweeping).
type Sweep struct {
	// BatchSize is SWEEP_BATCH_SIZE: the events claimed and processed per transaction.
	BatchSize int
	// Grace is SWEEP_GRACE: pending events younger than this are left to the queue path. Nil:
	// unset; zero: no grace, every pending event is due.
	Grace *time.Duration
	// Shards is SWEEPER_SHARDS: how many static shards the scheduled sweeper agents split the hash
	// space into (the stack runs one rule per shard).
	Shards int
}

// History configures the archive: packed pages older than Retention move from the database to one
// S3 object a page in Bucket (pagestore's move, run by the sweeper's maintenance), and every read
// of an event finds it in whichever tier holds it.
type History struct {
	// Bucket is HISTORY_BUCKET: the bucket of the archived pages. Empty: no archive, the whole
	// packed history stays in the database. Reached through the AWS SDK's configuration
	// (AWS_ENDPOINT_URL_S3 locally).
	Bucket string
	// Retention is HISTORY_RETENTION: how old a page's newest event must be before the page moves
	// to the bucket. Nil: unset (sweeping.DefaultRetention); zero: as soon as it is packed. Only
	// with Bucket.
	Retention *time.Duration
}

// Agent configures agents: the standalone agent (cmd/agent) and the sweepers that run as agents
// (internal/agents, through wire.Agent; zero fields take its defaults).
type Agent struct {
	// Name is AGENT_NAME: the agent's name in the agents table (default: host and process id).
	Name string
	// PulseInterval and Expiration are AGENT_PULSE_INTERVAL and AGENT_EXPIRATION: how often an agent
	// pulses, and how long after its last pulse the others eject it (at least 3 pulse intervals).
	PulseInterval, Expiration time.Duration
	// PollInterval is AGENT_POLL_INTERVAL: the pause when nothing is due (plus up to half of it).
	PollInterval time.Duration
	// BatchSize is AGENT_BATCH_SIZE: the events one claim of an agent takes.
	BatchSize int
	// ShardsTotal and ShardsAssigned are SHARDS_TOTAL and SHARDS_ASSIGNED: static sharding, this
	// process's shards of the total. Both or neither; nil: dynamic sharding.
	ShardsTotal *int
	// ShardsAssigned lists the shards this process's agents hold (SHARDS_ASSIGNED, comma-separated):
	// the standalone agent runs one agent per shard listed; nil for dynamic sharding.
	ShardsAssigned []int
}

// Idempotency configures idempotency keys (api.Idempotency; zero fields take its defaults).
type Idempotency struct {
	// TTL is IDEMPOTENCY_TTL: how long a stored key answers repeats.
	TTL time.Duration
	// Wait is IDEMPOTENCY_WAIT: how long a request waits for one with its key in flight before
	// answering 409.
	Wait time.Duration
	// Required is IDEMPOTENCY_REQUIRED: creates without the header are refused (400).
	Required bool
}

// Webhook configures the delivery of tasks, events that carry a webhook (internal/webhook's Config
// and RetryDelay; zero fields take its defaults).
type Webhook struct {
	// Secret is WEBHOOK_SECRET: the Standard Webhooks signing secret, whsec_ and the key in base64
	// (webhook.ParseSecret checks it; its errors never contain it). Never printed: String and
	// GoString redact it.
	Secret string
	// SecretARN is WEBHOOK_SECRET_ARN: the Secrets Manager secret the Lambda functions read the
	// signing secret from, instead of WEBHOOK_SECRET (never both).
	SecretARN string
	// Timeout is WEBHOOK_TIMEOUT: how long one delivery may take.
	Timeout time.Duration
	// RetryBase and RetryMax are RETRY_BASE and RETRY_MAX: the backoff after a temporary failure,
	// base*2^(attempt-1) with full jitter, capped at RetryMax (at least RetryBase when both are set).
	RetryBase, RetryMax time.Duration
	// AllowLoopback is WEBHOOK_ALLOW_LOOPBACK: deliveries may connect to 127.0.0.0/8 and ::1 (local
	// runs).
	AllowLoopback bool
	// AllowPrivate is WEBHOOK_ALLOW_PRIVATE: deliveries may connect to RFC 1918 and fc00::/7
	// addresses (receivers inside a VPC), never to a cloud metadata endpoint. The API checks a
	// task's url at create with both settings (wire.WebhookPolicy).
	AllowPrivate bool
	// LambdaRuntimeAPI is AWS_LAMBDA_RUNTIME_API, which Lambda (and its emulator) sets: the
	// Runtime API's address, which no delivery may connect to whatever the settings (webhook.Policy).
	LambdaRuntimeAPI string
	// APIHosts is WEBHOOK_API_HOSTS: the host names of this system's own API (the CDK stack sets
	// the REST API's execute-api domain on the API and on what delivers), which no task's url may
	// name whatever the settings (webhook.Policy.OwnHosts): with the API open to unsigned requests,
	// a task there would make a task of each of its deliveries, without end.
	APIHosts []string
	// WorkerMaxReferences is WORKER_MAX_REFERENCES: the references one event worker holds before it
	// is willTerminate (processing.EventService; zero: its default, 100).
	WorkerMaxReferences int
	// WorkerRetention is WORKER_RETENTION: how long a done event worker's row is kept (zero: its
	// default, 7 days).
	WorkerRetention time.Duration
}

// String prints w with its Secret redacted (fmt uses it for %v and %+v, also inside a Config).
func (w Webhook) String() string {
	secret := ""
	if w.Secret != "" {
		secret = "[redacted]"
	}
	return fmt.Sprintf("{Secret:%s SecretARN:%s Timeout:%s RetryBase:%s RetryMax:%s AllowLoopback:%t AllowPrivate:%t APIHosts:%v WorkerMaxReferences:%d WorkerRetention:%s}",
		secret, w.SecretARN, w.Timeout, w.RetryBase, w.RetryMax, w.AllowLoopback, w.AllowPrivate, w.APIHosts, w.WorkerMaxReferences, w.WorkerRetention)
}

// GoString is String, for %#v.
func (w Webhook) GoString() string { return "config.Webhook" + w.String() }

// Local configures the local runner (cmd/local, internal/local.Env); the functions ignore it.
type Local struct {
	// HTTPAddr is HTTP_ADDR: where the API listens, host:port (port 0 picks one); a loopback
	// address unless AllowRemote.
	HTTPAddr string
	// AllowRemote is LOCAL_ALLOW_REMOTE: HTTP_ADDR may be an address others can reach. The local
	// API has no authorisation, the console beside it retries tasks and redrives queues, and
	// `make run` lets tasks reach loopback receivers: whoever reaches HTTP_ADDR can do all of it.
	AllowRemote bool
	// QueueName is QUEUE_NAME: the queue (and <name>-dlq) created on the SQS endpoint if missing.
	QueueName string
	// MappingConcurrency and MappingBatchSize are MAPPING_CONCURRENCY and MAPPING_BATCH_SIZE: the
	// pollers and batch size of the local event source mapping. MappingConcurrency is nil when
	// unset; 0 turns the local queue consumer off, leaving every async event to the agents.
	MappingConcurrency *int
	MappingBatchSize   int
	// ProcessorTimeout is PROCESSOR_TIMEOUT: the deadline of each processor invocation.
	ProcessorTimeout time.Duration
	// AsyncLinger is ASYNC_LINGER: POST /events/async answers once its event is committed, and a
	// message names the events committed within this long. Nil: unset; zero: answer after the
	// message is sent, as a Lambda does.
	AsyncLinger *time.Duration
	// SweepInterval is SWEEP_INTERVAL: the local sweeper agent's pause when nothing is due, at most
	// MaxAgentInterval as AGENT_POLL_INTERVAL's (an agent starts WAITING and pauses this long before
	// its first claim: SWEEP_INTERVAL=1000h ran a sweeper that never claimed).
	SweepInterval time.Duration
}

// Load reads the configuration with getenv (os.Getenv in production). The error, if any, names
// every variable with a bad value.
func Load(getenv func(string) string) (Config, error) { return LoadChecked(getenv, nil) }

// LoadEnviron is Load of the process's environment: LoadEnvironOf(os.Getenv, os.Environ()), what
// every entrypoint reads.
func LoadEnviron() (Config, error) { return LoadEnvironOf(os.Getenv, os.Environ()) }

// LoadEnvironOf is LoadChecked of an environment whose variables, "name=value" each, are environ,
// read through getenv (os.Getenv, or a reading of it such as LocalGetenv's): a variable environ sets,
// even to nothing, is set; and a variable with one of OwnedPrefixes that no component reads is
// refused, naming it and the variables of its prefix. A nil environ checks neither: Load's reading.
func LoadEnvironOf(getenv func(string) string, environ []string) (Config, error) {
	names := make([]string, 0, len(environ))
	set := make(map[string]bool, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
		set[name] = true
	}
	return load(getenv, func(k string) bool { return set[k] }, names)
}

// IsSetInEnviron says whether the process's environment sets name, even to nothing.
func IsSetInEnviron(name string) bool {
	_, ok := os.LookupEnv(name)
	return ok
}

// LoadChecked is Load, told by isSet (nil: Load) which variables are set: a number, a duration or
// a true/false that is set but empty (or spaces) is then refused, naming it, rather than read as
// unset and given its component's default without a word (SWEEP_BATCH_SIZE=$N with N unset). A
// string set empty still means none (HISTORY_BUCKET= : no archive).
func LoadChecked(getenv func(string) string, isSet func(string) bool) (Config, error) {
	return load(getenv, isSet, nil)
}

// load is LoadChecked, refusing those of names (the variables set) that are unknown.
func load(getenv func(string) string, isSet func(string) bool, names []string) (Config, error) {
	p := &parser{getenv: getenv, isSet: isSet}
	c := Config{
		DB: DB{
			DSN:          p.str("DB_DSN"),
			Host:         p.str("DB_HOST"),
			Port:         p.integer("DB_PORT", 1, 65535),
			Name:         p.str("DB_NAME"),
			User:         p.str("DB_USER"),
			Password:     p.str("DB_PASSWORD"),
			IAMAuth:      p.flag("DB_IAM_AUTH"),
			TLS:          p.flag("DB_TLS"),
			Region:       cmp.Or(p.str("AWS_REGION"), p.str("AWS_DEFAULT_REGION")),
			MaxOpenConns: p.integer("DB_MAX_OPEN_CONNS", 1, 0),
			Migrate:      p.boolean("DB_MIGRATE"),
		},
		Store: Store{
			Allocator:   p.str("ALLOCATOR"),
			BlockSize:   p.integer("ALLOCATOR_BLOCK_SIZE", 1, MaxBlockSize),
			BlockMaxAge: p.positiveUpTo("ALLOCATOR_BLOCK_MAX_AGE", MaxBlockMaxAge),
		},
		QueueURL: p.str("QUEUE_URL"),
		Processor: Processor{
			VisibilityHeartbeat: p.positiveUpTo("VISIBILITY_HEARTBEAT", MaxVisibility),
			VisibilityExtension: p.positiveUpTo("VISIBILITY_EXTENSION", MaxVisibility),
		},
		Sweep: Sweep{
			BatchSize: p.integer("SWEEP_BATCH_SIZE", 1, MaxBatchSize),
			Grace:     p.nonNegative("SWEEP_GRACE", "a duration such as 10s, or 0 for no grace"),
			Shards:    p.integer("SWEEPER_SHARDS", 1, MaxShards),
		},
		Agent: Agent{
			Name:           p.str("AGENT_NAME"),
			PulseInterval:  p.positiveUpTo("AGENT_PULSE_INTERVAL", MaxAgentInterval),
			Expiration:     p.positiveUpTo("AGENT_EXPIRATION", MaxAgentInterval),
			PollInterval:   p.positiveUpTo("AGENT_POLL_INTERVAL", MaxAgentInterval),
			BatchSize:      p.integer("AGENT_BATCH_SIZE", 1, MaxBatchSize),
			ShardsTotal:    p.optionalInt("SHARDS_TOTAL", 1, MaxShards),
			ShardsAssigned: p.intList("SHARDS_ASSIGNED"),
		},
		Idempotency: Idempotency{
			TTL:      p.positiveUpTo("IDEMPOTENCY_TTL", MaxIdempotencyTTL),
			Wait:     p.positive("IDEMPOTENCY_WAIT"),
			Required: p.flag("IDEMPOTENCY_REQUIRED"),
		},
		Webhook: Webhook{
			Secret:        p.str("WEBHOOK_SECRET"),
			SecretARN:     p.str("WEBHOOK_SECRET_ARN"),
			Timeout:       p.positive("WEBHOOK_TIMEOUT"),
			RetryBase:     p.positive("RETRY_BASE"),
			RetryMax:      p.positive("RETRY_MAX"),
			AllowLoopback: p.flag("WEBHOOK_ALLOW_LOOPBACK"),
			AllowPrivate:  p.flag("WEBHOOK_ALLOW_PRIVATE"),
			// Lambda's own variable, not this system's: never refused as unknown.
			LambdaRuntimeAPI: p.str("AWS_LAMBDA_RUNTIME_API"),
			APIHosts:         p.hostList("WEBHOOK_API_HOSTS"),

			WorkerMaxReferences: p.integer("WORKER_MAX_REFERENCES", 1, MaxWorkerReferences),
			WorkerRetention:     p.positive("WORKER_RETENTION"),
		},
		History: History{
			Bucket:    p.str("HISTORY_BUCKET"),
			Retention: p.nonNegative("HISTORY_RETENTION", "a duration such as 2h, or 0 to archive pages as soon as they are packed"),
		},
		Counter: Counter{TopicARN: p.str("COUNTER_TOPIC_ARN"), ResultsURL: p.str("COUNTER_RESULTS_URL"),
			LocalTopic: p.str("COUNTER_TOPIC_LOCAL") != ""},
		MetricsAddr: p.str("METRICS_ADDR"),
		Local: Local{
			HTTPAddr:           p.str("HTTP_ADDR"),
			AllowRemote:        p.flag("LOCAL_ALLOW_REMOTE"),
			QueueName:          p.str("QUEUE_NAME"),
			MappingConcurrency: p.optionalInt("MAPPING_CONCURRENCY", 0, MaxMappingConcurrency),
			MappingBatchSize:   p.integer("MAPPING_BATCH_SIZE", 1, MaxMappingBatchSize),
			ProcessorTimeout:   p.positive("PROCESSOR_TIMEOUT"),
			AsyncLinger:        p.nonNegative("ASYNC_LINGER", "a duration such as 5ms, or 0 to answer after sending"),
			SweepInterval:      p.positiveUpTo("SWEEP_INTERVAL", MaxAgentInterval),
		},
	}
	if c.DB.DSN == "" && (c.DB.Host == "" || c.DB.User == "") {
		p.fail("set DB_DSN, or DB_HOST and DB_USER")
	}
	if c.DB.DSN != "" {
		var beside []string
		for _, k := range dbParts {
			if p.str(k) != "" {
				beside = append(beside, k)
			}
		}
		if len(beside) > 0 {
			p.fail(fmt.Sprintf("DB_DSN names the whole database (server, user, password, database), so %s would be ignored: "+
				"set DB_DSN alone, or unset it and name the database with %s", strings.Join(beside, ", "), strings.Join(dbParts, ", ")))
		}
	}
	if b := c.History.Bucket; b != "" && !bucketName(b) {
		p.fail(fmt.Sprintf("HISTORY_BUCKET must be an S3 bucket's name (3 to 63 lowercase letters, digits, '.' and '-', "+
			"beginning and ending with a letter or digit), got %q", b))
	}
	if u := c.QueueURL; u != "" && !queueURL(u) {
		p.fail(fmt.Sprintf("QUEUE_URL must be a queue's URL, https://<host>/<account>/<name> (the stack's queue; http only for a local endpoint), got %q", u))
	}
	if n := c.Agent.Name; n != "" && (!utf8.ValidString(n) || utf8.RuneCountInString(n) > MaxAgentName || strings.ContainsFunc(n, unicode.IsControl) || strings.ContainsFunc(n, exactlyonce.Invisible)) {
		shown := n
		if r := []rune(n); len(r) > 80 {
			shown = string(r[:80]) + "..."
		}
		p.fail(fmt.Sprintf("AGENT_NAME must be text of at most %d characters, without control, invisible or formatting characters "+
			"(the agents table's column; two names that differ by an invisible character look alike), got %q", MaxAgentName, shown))
	}
	if c.History.Retention != nil && c.History.Bucket == "" {
		p.fail("HISTORY_RETENTION is set but HISTORY_BUCKET is not: without a bucket nothing is archived, so the retention would be ignored")
	}
	if a := c.Store.Allocator; a != "" && !slices.Contains(Allocators(), a) {
		p.fail(fmt.Sprintf("ALLOCATOR must be %s, got %q", strings.Join(quoted(Allocators()), " or "), a))
	}
	// Together or not is judged on what is set, so that a bad value (read as nil, and said) is not
	// also said to be missing, nor one set to nothing (said too, when the parser can tell).
	if shards := [2]string{"SHARDS_TOTAL", "SHARDS_ASSIGNED"}; p.str(shards[0]) != "" && !p.given(shards[1]) ||
		p.str(shards[1]) != "" && !p.given(shards[0]) {
		p.fail("set SHARDS_TOTAL and SHARDS_ASSIGNED together (static sharding), or neither (dynamic sharding)")
	} else if a := c.Agent; a.ShardsTotal != nil {
		for _, i := range a.ShardsAssigned {
			if i >= *a.ShardsTotal {
				p.fail(fmt.Sprintf("SHARDS_ASSIGNED (%d) must be below SHARDS_TOTAL (%d): shards are numbered from 0", i, *a.ShardsTotal))
			}
		}
	}
	if a := c.Agent; a.PulseInterval > 0 && a.Expiration > 0 && a.Expiration < 3*a.PulseInterval {
		p.fail(fmt.Sprintf("AGENT_EXPIRATION (%s) must be at least 3 times AGENT_PULSE_INTERVAL (%s)", a.Expiration, a.PulseInterval))
	}
	if e := c.Agent.Expiration; e > 0 && e < MinAgentExpiration {
		p.fail(fmt.Sprintf("AGENT_EXPIRATION (%s) must be at least %s: the other agents eject an agent whose expiration "+
			"has passed when they look, and a shorter one has passed at every look (ms for s?)", e, MinAgentExpiration))
	}
	if h, e := c.Processor.VisibilityHeartbeat, c.Processor.VisibilityExtension; h > 0 && e > 0 && e <= h {
		p.fail(fmt.Sprintf("VISIBILITY_EXTENSION (%s) must be longer than VISIBILITY_HEARTBEAT (%s)", e, h))
	}
	if w := c.Webhook; w.Secret != "" && w.SecretARN != "" {
		p.fail("set WEBHOOK_SECRET or WEBHOOK_SECRET_ARN, not both")
	}
	if q := c.Local.QueueName; q != "" && (!queueName(q) || slices.Contains(LocalCounterQueues(), q)) {
		p.fail(fmt.Sprintf("QUEUE_NAME must be a queue's name, 1 to 76 letters, digits, '-' and '_' (SQS's rule, with room for "+
			"its \"-dlq\"), and none of the counter service's queues the local runner creates beside it (%s), got %q",
			strings.Join(LocalCounterQueues(), ", "), q))
	}
	if a := c.Counter.TopicARN; a != "" && !topicARN(a) {
		p.fail(fmt.Sprintf("COUNTER_TOPIC_ARN must be an SNS topic's ARN (arn:aws:sns:<region>:<account>:<name>), got %q", a))
	}
	if u := c.Counter.ResultsURL; u != "" && !queueURL(u) {
		p.fail(fmt.Sprintf("COUNTER_RESULTS_URL must be a queue's URL, https://<host>/<account>/<name> (http only for a local endpoint), got %q", u))
	}
	if a := c.Webhook.SecretARN; a != "" && (!strings.HasPrefix(a, "arn:") || !strings.Contains(a, ":secretsmanager:") || !strings.Contains(a, ":secret:")) {
		p.fail(fmt.Sprintf("WEBHOOK_SECRET_ARN must be a Secrets Manager secret ARN (arn:aws:secretsmanager:…), got %q", a))
	}
	if g := c.Sweep.Grace; g != nil && *g > MaxSweepGrace {
		p.fail(fmt.Sprintf("SWEEP_GRACE must be at most %s (SQS keeps a message at most 14 days: past it no message can come, "+
			"and an event whose message was lost would wait for ever), got %q", MaxSweepGrace, p.str("SWEEP_GRACE")))
	}
	if t := c.Webhook.Timeout; t > MaxWebhookTimeout {
		p.fail(fmt.Sprintf("WEBHOOK_TIMEOUT (%s) must be at most %s: a delivery must end within its task's lease "+
			"(2 minutes, less 2 s for its settlement), which the engine cuts it at", t, MaxWebhookTimeout))
	}
	if w := c.Webhook; w.RetryBase > 0 && w.RetryMax > 0 && w.RetryMax < w.RetryBase {
		p.fail(fmt.Sprintf("RETRY_MAX (%s) must be at least RETRY_BASE (%s)", w.RetryMax, w.RetryBase))
	}
	if v := p.str("HTTP_ADDR"); v != "" {
		if host, _, err := net.SplitHostPort(v); err != nil {
			p.fail(fmt.Sprintf("HTTP_ADDR must be host:port, such as 127.0.0.1:8080, got %q", v))
		} else if !loopbackHost(host) && !c.Local.AllowRemote {
			p.fail(fmt.Sprintf("HTTP_ADDR %s is not a loopback address: the local API has no authorisation, the console "+
				"beside it retries tasks and redrives queues, and tasks may reach this machine's loopback receivers, so anyone "+
				"who reaches it could do all of that. Listen on 127.0.0.1 (the default) and reach it through an SSH tunnel, "+
				"or set LOCAL_ALLOW_REMOTE=true if the network it listens on is yours alone", v))
		}
	}
	if v := p.str("METRICS_ADDR"); v != "" && v != MetricsOff {
		if _, _, err := net.SplitHostPort(v); err != nil {
			p.fail(fmt.Sprintf("METRICS_ADDR must be host:port, such as 127.0.0.1:9464, or %s, got %q", MetricsOff, v))
		}
	}
	if v := p.str("LOG_LEVEL"); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			p.fail(fmt.Sprintf("LOG_LEVEL must be debug, info, warn or error, got %q", v))
		}
	}
	p.unknownNames(names)
	if len(p.errs) > 0 {
		return c, fmt.Errorf("configuration: %s", strings.Join(p.errs, "; "))
	}
	return c, nil
}

// loopbackHost reports whether a listen address's host is loopback only: localhost or a loopback
// IP. An empty host, or an unspecified address, listens on every interface.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
