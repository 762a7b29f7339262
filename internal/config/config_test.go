package config_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// What the environment does not set is left zero (nil where zero means something): the component
// it configures applies its default (internal/wire's tests check the defaults themselves).
func TestUnsetIsZero(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d"}))
	require.NoError(t, err)
	require.Equal(t, config.Config{DB: config.DB{DSN: "u:p@tcp(h:3306)/d"}}, c)
	require.Nil(t, c.DB.Migrate)
	require.Nil(t, c.Sweep.Grace)
	require.Nil(t, c.Local.AsyncLinger)
	require.Equal(t, slog.LevelInfo, c.LogLevel)
}

func TestAWSStyleConfiguration(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DB_HOST": "proxy.example", "DB_USER": "admin", "DB_IAM_AUTH": "true",
		"AWS_REGION": "eu-west-1", "QUEUE_URL": "https://sqs/123456789012/q", "ALLOCATOR": "literal", "LOG_LEVEL": "debug",
		"DB_MIGRATE": "false", "DB_PORT": "3307", "DB_MAX_OPEN_CONNS": "8", "ALLOCATOR_BLOCK_SIZE": "64",
		"ALLOCATOR_BLOCK_MAX_AGE": "90s"}))
	require.NoError(t, err)
	require.True(t, c.DB.IAMAuth)
	require.False(t, c.DB.TLS)
	require.Equal(t, "eu-west-1", c.DB.Region)
	require.Empty(t, c.DB.Name, "unset: the store's default database name")
	require.Equal(t, 3307, c.DB.Port)
	require.Equal(t, 8, c.DB.MaxOpenConns)
	require.Equal(t, new(false), c.DB.Migrate)
	require.Equal(t, "https://sqs/123456789012/q", c.QueueURL)
	require.Equal(t, config.Store{Allocator: "literal", BlockSize: 64, BlockMaxAge: 90 * time.Second}, c.Store)
	require.Equal(t, slog.LevelDebug, c.LogLevel)

	c, err = config.Load(env(map[string]string{"DB_DSN": "d", "AWS_DEFAULT_REGION": "us-west-2"}))
	require.NoError(t, err)
	require.Equal(t, "us-west-2", c.DB.Region, "AWS_DEFAULT_REGION when AWS_REGION is unset")
}

func TestSweepAndProcessor(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DB_DSN": "d", "SWEEP_BATCH_SIZE": "100", "SWEEP_GRACE": "3s",
		"VISIBILITY_HEARTBEAT": "500ms", "VISIBILITY_EXTENSION": "2s"}))
	require.NoError(t, err)
	require.Equal(t, config.Sweep{BatchSize: 100, Grace: new(3 * time.Second)}, c.Sweep)
	require.Equal(t, config.Processor{VisibilityHeartbeat: 500 * time.Millisecond, VisibilityExtension: 2 * time.Second}, c.Processor)
}

// SWEEP_GRACE=0 is no grace, not the sweeper's default.
func TestZeroSweepGraceIsZero(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0", "0s", " 0ms "} {
		c, err := config.Load(env(map[string]string{"DB_DSN": "d", "SWEEP_GRACE": v}))
		require.NoError(t, err, v)
		require.NotNil(t, c.Sweep.Grace, "SWEEP_GRACE=%q is set", v)
		require.Zero(t, *c.Sweep.Grace, v)
	}
	// Past 14 days, the longest SQS keeps a message, no queue can still bring a pending event's
	// message, so such a grace leaves an event whose message was lost pending for ever:
	// SWEEP_GRACE=1000000h started a make run whose sweeper never processed an event.
	for _, v := range []string{"336h0m1s", "1000000h", "2562047h"} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", "SWEEP_GRACE": v}))
		require.ErrorContains(t, err, "SWEEP_GRACE must be at most 336h0m0s", v)
	}
	_, err := config.Load(env(map[string]string{"DB_DSN": "d", "SWEEP_GRACE": "336h"}))
	require.NoError(t, err, "SWEEP_GRACE at its largest")
}

// The local runner's variables are read by the same parser as every other.
func TestLocal(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DB_DSN": "d", "HTTP_ADDR": "127.0.0.1:0", "QUEUE_NAME": "mine",
		"MAPPING_CONCURRENCY": "8", "MAPPING_BATCH_SIZE": "5", "PROCESSOR_TIMEOUT": "10s", "ASYNC_LINGER": "20ms",
		"SWEEP_INTERVAL": "1s"}))
	require.NoError(t, err)
	require.Equal(t, config.Local{HTTPAddr: "127.0.0.1:0", QueueName: "mine", MappingConcurrency: new(8), MappingBatchSize: 5,
		ProcessorTimeout: 10 * time.Second, AsyncLinger: new(20 * time.Millisecond), SweepInterval: time.Second}, c.Local)

	c, err = config.Load(env(map[string]string{"DB_DSN": "d", "ASYNC_LINGER": "0"}))
	require.NoError(t, err)
	require.Equal(t, new(time.Duration(0)), c.Local.AsyncLinger, "ASYNC_LINGER=0 is set: answer after sending")

	for _, bad := range []string{"-1s", "5", "soon"} {
		_, err = config.Load(env(map[string]string{"DB_DSN": "d", "ASYNC_LINGER": bad}))
		require.ErrorContains(t, err, "ASYNC_LINGER must be", "ASYNC_LINGER=%s", bad)
	}

	// QUEUE_NAME is a name SQS takes, with room for its "-dlq", and none of the counter service's
	// queues, which the local runner creates beside it: QUEUE_NAME=counters-dlq made the counter
	// service's dead letters the events queue's messages (the processor failed them into a
	// counters-dlq-dlq, where no redrive of the counters looks), counter-results mixed the counter
	// notifications into it; a/b stopped the runner with an SQS error that did not name QUEUE_NAME.
	for _, bad := range []string{"a/b", "events.fifo", "x y", strings.Repeat("q", 77), "counters", "counters-dlq", "counter-results", "counter-results-dlq"} {
		_, err = config.Load(env(map[string]string{"DB_DSN": "d", "QUEUE_NAME": bad}))
		require.ErrorContains(t, err, "QUEUE_NAME must be", "QUEUE_NAME=%s", bad)
	}
	for _, good := range []string{"events", "Events_2", strings.Repeat("q", 76)} {
		_, err = config.Load(env(map[string]string{"DB_DSN": "d", "QUEUE_NAME": good}))
		require.NoError(t, err, "QUEUE_NAME=%s", good)
	}
}

// METRICS_ADDR is host:port or off, for the long-running processes.
func TestMetricsAddr(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"127.0.0.1:9464", ":0", "off", ""} {
		c, err := config.Load(env(map[string]string{"DB_DSN": "d", "METRICS_ADDR": v}))
		require.NoError(t, err, v)
		require.Equal(t, v, c.MetricsAddr)
	}
	_, err := config.Load(env(map[string]string{"DB_DSN": "d", "METRICS_ADDR": "9464"}))
	require.ErrorContains(t, err, `METRICS_ADDR must be host:port, such as 127.0.0.1:9464, or off, got "9464"`)
}

// One error names every bad variable, whatever the mix.
func TestEveryBadValueIsReported(t *testing.T) {
	t.Parallel()
	bad := map[string]string{"DB_PORT": "x", "DB_MIGRATE": "maybe", "DB_IAM_AUTH": "yes please", "DB_TLS": "2",
		"DB_MAX_OPEN_CONNS": "0", "ALLOCATOR": "fast", "ALLOCATOR_BLOCK_SIZE": "-1",
		"VISIBILITY_HEARTBEAT": "0", "VISIBILITY_EXTENSION": "-5s",
		"SWEEP_GRACE": "soon", "SWEEP_BATCH_SIZE": "0", "LOG_LEVEL": "loud",
		"HTTP_ADDR": "8080", "MAPPING_CONCURRENCY": "many", "MAPPING_BATCH_SIZE": "0", "PROCESSOR_TIMEOUT": "0s",
		"ASYNC_LINGER": "-1ms", "SWEEP_INTERVAL": "often", "METRICS_ADDR": "9464"}
	_, err := config.Load(env(bad))
	require.Error(t, err)
	require.ErrorContains(t, err, "DB_DSN, or DB_HOST and DB_USER")
	for k, v := range bad {
		require.ErrorContains(t, err, k+" must be", k)
		require.ErrorContains(t, err, `"`+v+`"`, "the bad value of %s is quoted", k)
	}
	require.Len(t, strings.Split(err.Error(), "; "), len(bad)+1, "one message per problem: %v", err)
}

func TestBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ k, v, want string }{
		{"DB_PORT", "70000", "DB_PORT must be an integer from 1 to 65535"},
		{"ALLOCATOR", "fast", `ALLOCATOR must be "block" or "literal", got "fast"`},
		{"SWEEP_GRACE", "-1s", "SWEEP_GRACE must be a duration such as 10s, or 0 for no grace"},
		{"SWEEP_BATCH_SIZE", "0", `SWEEP_BATCH_SIZE must be an integer from 1 to 10000, got "0"`},
		{"PROCESSOR_TIMEOUT", "0", `PROCESSOR_TIMEOUT must be a positive duration such as 5s, got "0"`},
	} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", tc.k: tc.v}))
		require.ErrorContains(t, err, tc.want, "%s=%s", tc.k, tc.v)
	}

	// The extension must outlast the heartbeat, when both are set.
	_, err := config.Load(env(map[string]string{"DB_DSN": "d", "VISIBILITY_HEARTBEAT": "10s", "VISIBILITY_EXTENSION": "10s"}))
	require.ErrorContains(t, err, "VISIBILITY_EXTENSION (10s) must be longer than VISIBILITY_HEARTBEAT (10s)")
	_, err = config.Load(env(map[string]string{"DB_DSN": "d", "VISIBILITY_EXTENSION": "5s"}))
	require.NoError(t, err, "alone, either is checked only by its own rules: the other is the processor's default, which config does not know")

	// DB_HOST without DB_USER is not enough.
	_, err = config.Load(env(map[string]string{"DB_HOST": "h"}))
	require.ErrorContains(t, err, "set DB_DSN, or DB_HOST and DB_USER")
}

// A number past what its component can take is refused at start, naming the variable and its
// range, as a malformed one is: each of these, accepted, started a process that then panicked
// (SWEEP_BATCH_SIZE and AGENT_BATCH_SIZE: a claim's slice of that capacity; MAPPING_CONCURRENCY:
// the pollers' channel), ate the machine's memory (MAPPING_CONCURRENCY=100000000: a goroutine a
// poller), answered every create with a 500 (ALLOCATOR_BLOCK_SIZE past BIGINT), failed every event
// worker's insert (WORKER_MAX_REFERENCES past the INT column), gave every shard the whole hash space
// (SHARDS_TOTAL past 2^32), or was silently taken as another value (MAPPING_BATCH_SIZE over 10: SQS
// returns at most 10 messages a receive). The largest value of each is accepted.
func TestNumbersPastTheirComponentsAreRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k        string
		max      int
		extra    map[string]string
		tooLarge []string
	}{
		{"ALLOCATOR_BLOCK_SIZE", 1_000_000, nil, []string{"1000001", "9223372036854775807"}},
		{"SWEEP_BATCH_SIZE", 10_000, nil, []string{"10001", "100000000", "9223372036854775807"}},
		{"AGENT_BATCH_SIZE", 10_000, nil, []string{"10001", "9223372036854775807"}},
		{"MAPPING_BATCH_SIZE", 10, nil, []string{"11", "100"}},
		{"MAPPING_CONCURRENCY", 1_000, nil, []string{"1001", "100000000", "9223372036854775807"}},
		{"WORKER_MAX_REFERENCES", 10_000, nil, []string{"10001", "2147483648", "9223372036854775807"}},
		{"SWEEPER_SHARDS", 1_024, nil, []string{"1025", "9223372036854775807"}},
		{"SHARDS_TOTAL", 1_024, map[string]string{"SHARDS_ASSIGNED": "0"}, []string{"1025", "4294967297", "9223372036854775807"}},
	} {
		vars := func(v string) map[string]string {
			m := map[string]string{"DB_DSN": "d", tc.k: v}
			for k, x := range tc.extra {
				m[k] = x
			}
			return m
		}
		for _, v := range tc.tooLarge {
			_, err := config.Load(env(vars(v)))
			require.ErrorContains(t, err, fmt.Sprintf("%s must be an integer from", tc.k), "%s=%s", tc.k, v)
			require.ErrorContains(t, err, fmt.Sprintf("to %d, got %q", tc.max, v), "%s=%s", tc.k, v)
		}
		_, err := config.Load(env(vars(fmt.Sprint(tc.max))))
		require.NoError(t, err, "%s=%d, the largest", tc.k, tc.max)
	}
}

// A duration past what its component can take is refused at start, naming the variable and its
// largest value: IDEMPOTENCY_TTL=2562047h started a process whose every keyed create was a 500 (the
// key's expiry past what the database's timestamps hold); an SQS visibility timeout is at most
// 12 hours; an agent's pulse, expiration and poll past a day are a misconfiguration (and three
// pulse intervals of 1111111h overflowed, so that the check that the expiration covers them passed).
func TestDurationsPastTheirComponentsAreRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k        string
		max      time.Duration
		tooLarge []string
	}{
		{"IDEMPOTENCY_TTL", 720 * time.Hour, []string{"721h", "2562047h"}},
		{"VISIBILITY_HEARTBEAT", 12 * time.Hour, []string{"12h0m1s", "2562047h"}},
		{"VISIBILITY_EXTENSION", 12 * time.Hour, []string{"13h", "2562047h"}},
		{"AGENT_PULSE_INTERVAL", 24 * time.Hour, []string{"25h", "1111111h"}},
		{"AGENT_EXPIRATION", 24 * time.Hour, []string{"25h", "2562047h"}},
		{"AGENT_POLL_INTERVAL", 24 * time.Hour, []string{"25h", "2562047h"}},
		// make run's name for the local sweeper's AGENT_POLL_INTERVAL: unbounded, 1000h started a
		// runner whose sweeper, WAITING at start, paused that long before its first claim, so that
		// no event the queue missed was ever processed and no maintenance ran.
		{"SWEEP_INTERVAL", 24 * time.Hour, []string{"25h", "1000h", "2562047h"}},
		{"ALLOCATOR_BLOCK_MAX_AGE", 24 * time.Hour, []string{"24h0m1s", "2562047h"}},
	} {
		for _, v := range tc.tooLarge {
			_, err := config.Load(env(map[string]string{"DB_DSN": "d", tc.k: v}))
			require.ErrorContains(t, err, fmt.Sprintf("%s must be a positive duration of at most %s", tc.k, tc.max), "%s=%s", tc.k, v)
			require.ErrorContains(t, err, fmt.Sprintf("got %q", v), "%s=%s", tc.k, v)
		}
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", tc.k: tc.max.String()}))
		require.NoError(t, err, "%s=%s, the largest", tc.k, tc.max)
	}
}

// WEBHOOK_TIMEOUT past what a task's lease holds is refused: a delivery must end within its task's
// lease (processing.DefaultLease, 2 minutes, less the settlement's 2 s), which the engine cuts it
// at (TestNoDeliveryRunsUnderAnExpiredLease). WEBHOOK_TIMEOUT=5m was accepted, and would have been
// taken as about two minutes.
func TestAWebhookTimeoutPastTheLeaseIsRefused(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1m31s", "5m", "2562047h"} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", "WEBHOOK_TIMEOUT": v}))
		d, _ := time.ParseDuration(v)
		require.ErrorContains(t, err, "WEBHOOK_TIMEOUT ("+d.String()+") must be at most 1m30s", v)
	}
	c, err := config.Load(env(map[string]string{"DB_DSN": "d", "WEBHOOK_TIMEOUT": "90s"}))
	require.NoError(t, err, "the largest")
	require.Equal(t, config.MaxWebhookTimeout, c.Webhook.Timeout)
}

// A bad SHARDS_TOTAL or SHARDS_ASSIGNED beside the other is one message, its own, not also "set
// them together" as if the bad one were unset.
func TestABadShardIsOneMessage(t *testing.T) {
	t.Parallel()
	for _, vars := range []map[string]string{
		{"SHARDS_TOTAL": "4294967297", "SHARDS_ASSIGNED": "0"},
		{"SHARDS_TOTAL": "0", "SHARDS_ASSIGNED": "0"},
		{"SHARDS_TOTAL": "2", "SHARDS_ASSIGNED": "x"},
	} {
		vars["DB_DSN"] = "d"
		_, err := config.Load(env(vars))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "together", "%v", vars)
		require.Len(t, strings.Split(err.Error(), "; "), 1, "one message: %v", err)
	}
}

// LoadChecked tells a variable set to nothing from one unset: a number, a duration or a yes/no set
// empty (or to spaces) is refused, naming it, where Load takes it for unset and gives the
// component's default without a word (SWEEP_BATCH_SIZE=$N with N unset). A string set empty keeps
// its meaning of none (HISTORY_BUCKET= make run: no archive).
func TestSetButEmptyIsRefused(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"DB_MAX_OPEN_CONNS", "SWEEP_BATCH_SIZE", "MAPPING_CONCURRENCY", "SHARDS_ASSIGNED",
		"DB_MIGRATE", "IDEMPOTENCY_REQUIRED", "AGENT_PULSE_INTERVAL", "IDEMPOTENCY_TTL", "SWEEP_GRACE", "ASYNC_LINGER"} {
		for _, v := range []string{"", "  "} {
			vars := map[string]string{"DB_DSN": "d", k: v}
			isSet := func(name string) bool { _, ok := vars[name]; return ok }
			_, err := config.LoadChecked(env(vars), isSet)
			require.EqualError(t, err, "configuration: "+k+" is set but empty: give it a value, or unset it for its default", "%s=%q", k, v)
			_, err = config.Load(env(vars))
			require.NoError(t, err, "Load cannot tell set from unset")
		}
	}
	vars := map[string]string{"DB_DSN": "d", "HISTORY_BUCKET": "", "QUEUE_URL": "", "AGENT_NAME": ""}
	c, err := config.LoadChecked(env(vars), func(name string) bool { _, ok := vars[name]; return ok })
	require.NoError(t, err, "strings set empty mean none")
	require.Empty(t, c.History.Bucket)
}

// AGENT_NAME is shown in the agents table, whose column holds 64 characters: a longer name, or one
// that is not text, is refused at start rather than cut or replaced without a word.
func TestAgentName(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"a1", strings.Repeat("é", 64), "sweeper on host-7"} {
		c, err := config.Load(env(map[string]string{"DB_DSN": "d", "AGENT_NAME": good}))
		require.NoError(t, err, good)
		require.Equal(t, good, c.Agent.Name)
	}
	for _, bad := range []string{strings.Repeat("n", 65), "a" + strings.Repeat("é", 64), "a\xffb", "a\x01b", "a\u0085b"} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", "AGENT_NAME": bad}))
		require.ErrorContains(t, err, "AGENT_NAME must be text of at most 64 characters, without control, invisible or formatting characters", "%q", bad)
	}
	// Two agents whose names differ by an invisible character look alike in the console and the logs.
	for _, bad := range []string{"agent-\u202e7", "agent\u200b1", "a\u2028b", "\ufeffagent"} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", "AGENT_NAME": bad}))
		require.ErrorContains(t, err, "without control, invisible or formatting characters", "%q", bad)
	}
}

// QUEUE_URL must be a queue's URL: anything else started an API whose every async create's send
// failed (each event then waiting the sweeper's grace period), with a warning per create.
func TestQueueURL(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"https://sqs.eu-west-1.amazonaws.com/123456789012/ExactlyOnce-events", "http://127.0.0.1:4100/000000000000/events"} {
		c, err := config.Load(env(map[string]string{"DB_DSN": "d", "QUEUE_URL": good}))
		require.NoError(t, err, good)
		require.Equal(t, good, c.QueueURL)
	}
	for _, bad := range []string{"garbage", "ExactlyOnce-events", "sqs.eu-west-1.amazonaws.com/1/q", "ftp://h/q", "https://", "https:///q", "https://h/"} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", "QUEUE_URL": bad}))
		require.ErrorContains(t, err, "QUEUE_URL must be a queue's URL, https://<host>/<account>/<name>", "%q", bad)
	}
}

func TestLocalDSNs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "exactlyonce:exactlyonce@tcp(127.0.0.1:3306)/", config.LocalServerDSN)
	require.Equal(t, "exactlyonce:exactlyonce@tcp(127.0.0.1:3306)/exactlyonce", config.LocalDSN)
}

// The idempotency variables: durations above zero and a boolean; unset, zero (the API's defaults).
func TestIdempotency(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DB_DSN": "d", "IDEMPOTENCY_TTL": "1h", "IDEMPOTENCY_WAIT": "2s",
		"IDEMPOTENCY_REQUIRED": "true"}))
	require.NoError(t, err)
	require.Equal(t, config.Idempotency{TTL: time.Hour, Wait: 2 * time.Second, Required: true}, c.Idempotency)
	c, err = config.Load(env(map[string]string{"DB_DSN": "d"}))
	require.NoError(t, err)
	require.Zero(t, c.Idempotency)
	_, err = config.Load(env(map[string]string{"DB_DSN": "d", "IDEMPOTENCY_TTL": "0", "IDEMPOTENCY_WAIT": "soon",
		"IDEMPOTENCY_REQUIRED": "sometimes"}))
	for _, k := range []string{"IDEMPOTENCY_TTL", "IDEMPOTENCY_WAIT", "IDEMPOTENCY_REQUIRED"} {
		require.ErrorContains(t, err, k+" must be")
	}
}

func TestAgent(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d", "AGENT_NAME": "a1", "AGENT_PULSE_INTERVAL": "1s",
		"AGENT_EXPIRATION": "10s", "AGENT_POLL_INTERVAL": "500ms", "AGENT_BATCH_SIZE": "20",
		"SHARDS_TOTAL": "4", "SHARDS_ASSIGNED": "0"}))
	require.NoError(t, err)
	require.Equal(t, config.Agent{Name: "a1", PulseInterval: time.Second, Expiration: 10 * time.Second,
		PollInterval: 500 * time.Millisecond, BatchSize: 20, ShardsTotal: new(4), ShardsAssigned: []int{0}}, c.Agent)

	// Several shards for one process, as Hibernate Search's shards.assigned: its agents hold them.
	c, err = config.Load(env(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d", "SHARDS_TOTAL": "4", "SHARDS_ASSIGNED": "3, 0"}))
	require.NoError(t, err)
	require.Equal(t, []int{3, 0}, c.Agent.ShardsAssigned)

	for _, bad := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"SHARDS_TOTAL": "4"}, "set SHARDS_TOTAL and SHARDS_ASSIGNED together"},
		{map[string]string{"SHARDS_TOTAL": "4", "SHARDS_ASSIGNED": "4"}, "SHARDS_ASSIGNED (4) must be below SHARDS_TOTAL (4)"},
		{map[string]string{"SHARDS_TOTAL": "0", "SHARDS_ASSIGNED": "0"}, "SHARDS_TOTAL must be an integer from 1 to 1024"},
		{map[string]string{"SHARDS_TOTAL": "4", "SHARDS_ASSIGNED": "1,4"}, "SHARDS_ASSIGNED (4) must be below SHARDS_TOTAL (4)"},
		{map[string]string{"SHARDS_TOTAL": "4", "SHARDS_ASSIGNED": "1,1"}, "SHARDS_ASSIGNED names shard 1 twice"},
		{map[string]string{"SHARDS_TOTAL": "4", "SHARDS_ASSIGNED": "1,-2"}, "SHARDS_ASSIGNED must be a comma-separated list of integers >= 0"},
		{map[string]string{"SHARDS_TOTAL": "4", "SHARDS_ASSIGNED": "one"}, "SHARDS_ASSIGNED must be a comma-separated list"},
		{map[string]string{"AGENT_PULSE_INTERVAL": "2s", "AGENT_EXPIRATION": "5s"}, "AGENT_EXPIRATION (5s) must be at least 3 times"},
		// A typo of ms for s: an agent expiring 3 ms after its pulse is expired whenever another
		// agent looks, so every pulse of the others ejected it, it registered again, and each change
		// put every dynamic agent WAITING: the whole fleet claimed nothing while it ran (make run and
		// agents, 2026-11-28). 3 pulse intervals of 1 ms passed the rule above.
		{map[string]string{"AGENT_PULSE_INTERVAL": "1ms", "AGENT_EXPIRATION": "3ms"}, "AGENT_EXPIRATION (3ms) must be at least 1s"},
		{map[string]string{"AGENT_EXPIRATION": "999ms"}, "AGENT_EXPIRATION (999ms) must be at least 1s"},
	} {
		_, err := config.Load(env(bad.vars))
		require.ErrorContains(t, err, bad.want)
	}
}

// The webhook variables: the secret (or where to read it), durations above zero with the maximum
// delay at least the base, and two booleans; unset, zero (internal/webhook's defaults).
func TestWebhook(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	c, err := config.Load(env(map[string]string{"DB_DSN": "d", "WEBHOOK_SECRET": secret, "WEBHOOK_TIMEOUT": "3s",
		"RETRY_BASE": "500ms", "RETRY_MAX": "10m", "WEBHOOK_ALLOW_LOOPBACK": "true", "WEBHOOK_ALLOW_PRIVATE": "1"}))
	require.NoError(t, err)
	require.Equal(t, config.Webhook{Secret: secret, Timeout: 3 * time.Second, RetryBase: 500 * time.Millisecond,
		RetryMax: 10 * time.Minute, AllowLoopback: true, AllowPrivate: true}, c.Webhook)
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprint(c.Webhook)} {
		require.NotContains(t, s, "MfKQ9r8G", "the secret is not printed")
	}
	require.Contains(t, fmt.Sprint(c.Webhook), "Secret:[redacted]")
	// The API's own hosts, as the stack sets them: lower case, without a trailing dot.
	c, err = config.Load(env(map[string]string{"DB_DSN": "d", "WEBHOOK_API_HOSTS": "A1B2.execute-api.eu-west-1.amazonaws.com., api.example.com"}))
	require.NoError(t, err)
	require.Equal(t, []string{"a1b2.execute-api.eu-west-1.amazonaws.com", "api.example.com"}, c.Webhook.APIHosts)

	const arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:exactlyonce/webhook-AbCdEf"
	c, err = config.Load(env(map[string]string{"DB_DSN": "d", "WEBHOOK_SECRET_ARN": arn, "RETRY_BASE": "1s", "RETRY_MAX": "1s"}))
	require.NoError(t, err)
	require.Equal(t, config.Webhook{SecretARN: arn, RetryBase: time.Second, RetryMax: time.Second}, c.Webhook)

	c, err = config.Load(env(map[string]string{"DB_DSN": "d"}))
	require.NoError(t, err)
	require.Zero(t, c.Webhook)

	_, err = config.Load(env(map[string]string{"DB_DSN": "d", "RETRY_MAX": "5s"}))
	require.NoError(t, err, "RETRY_MAX alone is checked by its own rule: the base is the webhook package's default")

	for _, bad := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"WEBHOOK_TIMEOUT": "0"}, `WEBHOOK_TIMEOUT must be a positive duration such as 5s, got "0"`},
		{map[string]string{"WEBHOOK_TIMEOUT": "10"}, `WEBHOOK_TIMEOUT must be a positive duration such as 5s, got "10"`},
		{map[string]string{"RETRY_BASE": "-1s"}, `RETRY_BASE must be a positive duration such as 5s, got "-1s"`},
		{map[string]string{"RETRY_MAX": "soon"}, `RETRY_MAX must be a positive duration such as 5s, got "soon"`},
		{map[string]string{"RETRY_BASE": "2s", "RETRY_MAX": "1s"}, "RETRY_MAX (1s) must be at least RETRY_BASE (2s)"},
		{map[string]string{"WEBHOOK_ALLOW_LOOPBACK": "yes"}, `WEBHOOK_ALLOW_LOOPBACK must be true or false, got "yes"`},
		{map[string]string{"WEBHOOK_ALLOW_PRIVATE": "2"}, `WEBHOOK_ALLOW_PRIVATE must be true or false, got "2"`},
		{map[string]string{"WEBHOOK_API_HOSTS": "https://a.example.com"}, `WEBHOOK_API_HOSTS must be a comma-separated list of host names`},
		{map[string]string{"WEBHOOK_API_HOSTS": "a.example.com:443"}, `WEBHOOK_API_HOSTS must be a comma-separated list of host names`},
		{map[string]string{"WEBHOOK_API_HOSTS": "a.example.com,,b"}, `WEBHOOK_API_HOSTS must be a comma-separated list of host names`},
		{map[string]string{"WEBHOOK_SECRET_ARN": "exactlyonce/webhook"}, `WEBHOOK_SECRET_ARN must be a Secrets Manager secret ARN (arn:aws:secretsmanager:…), got "exactlyonce/webhook"`},
		{map[string]string{"WEBHOOK_SECRET_ARN": "arn:aws:s3:::bucket"}, `WEBHOOK_SECRET_ARN must be a Secrets Manager secret ARN`},
		{map[string]string{"WEBHOOK_SECRET": secret, "WEBHOOK_SECRET_ARN": arn}, "set WEBHOOK_SECRET or WEBHOOK_SECRET_ARN, not both"},
	} {
		bad.vars["DB_DSN"] = "d"
		_, err := config.Load(env(bad.vars))
		require.ErrorContains(t, err, bad.want)
		require.NotContains(t, err.Error(), "MfKQ9r8G", "the secret is not in the error")
	}
}

// DB_DSN names the whole database: a variable that names a part of it beside DB_DSN is refused, not
// ignored (DB_NAME=newcomer silently used the DSN's database).
func TestDBPartsBesideDBDSNAreRefused(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"DB_HOST", "DB_PORT", "DB_NAME", "DB_USER", "DB_PASSWORD"} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d", k: "3307"}))
		require.ErrorContains(t, err, "DB_DSN names the whole database", k)
		require.ErrorContains(t, err, "so "+k+" would be ignored", k)
	}
	_, err := config.Load(env(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d", "DB_NAME": "newcomer", "DB_USER": "me"}))
	require.ErrorContains(t, err, "so DB_NAME, DB_USER would be ignored")
	_, err = config.Load(env(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d", "DB_NAME": " "}))
	require.NoError(t, err, "blank is unset")
}

// HISTORY_BUCKET names the archive; HISTORY_RETENTION is its window, zero meaning zero (archive
// as soon as packed), unset the sweeper's default, and refused without a bucket or when it is not
// a duration.
func TestHistory(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DB_DSN": "d"}))
	require.NoError(t, err)
	require.Equal(t, config.History{}, c.History, "unset: no archive")

	c, err = config.Load(env(map[string]string{"DB_DSN": "d", "HISTORY_BUCKET": "history", "HISTORY_RETENTION": "36h"}))
	require.NoError(t, err)
	require.Equal(t, config.History{Bucket: "history", Retention: new(36 * time.Hour)}, c.History)

	c, err = config.Load(env(map[string]string{"DB_DSN": "d", "HISTORY_BUCKET": "history", "HISTORY_RETENTION": "0"}))
	require.NoError(t, err)
	require.NotNil(t, c.History.Retention)
	require.Zero(t, *c.History.Retention)

	_, err = config.Load(env(map[string]string{"DB_DSN": "d", "HISTORY_RETENTION": "2h"}))
	require.ErrorContains(t, err, "HISTORY_BUCKET is not")
	_, err = config.Load(env(map[string]string{"DB_DSN": "d", "HISTORY_BUCKET": "history", "HISTORY_RETENTION": "a week"}))
	require.ErrorContains(t, err, "HISTORY_RETENTION")

	// A bucket S3 could not have is refused at start: accepted, the process ran and every archived
	// read was a 503, every move a warning.
	for _, bad := range []string{"a/b", "b", "ab", "History", "-history", "history-", "his..tory", "his_tory", strings.Repeat("h", 64), "s3://history"} {
		_, err = config.Load(env(map[string]string{"DB_DSN": "d", "HISTORY_BUCKET": bad}))
		require.ErrorContains(t, err, fmt.Sprintf("HISTORY_BUCKET must be an S3 bucket's name (3 to 63 lowercase letters, digits, '.' and '-', beginning and ending with a letter or digit), got %q", bad))
	}
	for _, good := range []string{"history", "my.history-1", "abc", strings.Repeat("h", 63), "exactlyonce-historybucket-1a2b3c4d5e6f"} {
		c, err = config.Load(env(map[string]string{"DB_DSN": "d", "HISTORY_BUCKET": good}))
		require.NoError(t, err, good)
		require.Equal(t, good, c.History.Bucket)
	}
}

// The local runner's API has no authorisation, the console beside it retries tasks and redrives
// queues, and `make run` lets tasks reach loopback receivers: HTTP_ADDR on an address others can
// reach (every interface, or one that is not loopback) is refused unless LOCAL_ALLOW_REMOTE=true
// says the network is the operator's alone, as cmd/ui refuses UI_ADDR unless UI_ALLOW_REMOTE=true.
func TestHTTPAddrIsLoopbackUnlessAllowed(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.168.1.5:8080", "example.com:8080"} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", "HTTP_ADDR": addr}))
		require.ErrorContains(t, err, "HTTP_ADDR "+addr+" is not a loopback address", addr)
		require.ErrorContains(t, err, "LOCAL_ALLOW_REMOTE=true", addr)
		c, err := config.Load(env(map[string]string{"DB_DSN": "d", "HTTP_ADDR": addr, "LOCAL_ALLOW_REMOTE": "true"}))
		require.NoError(t, err, addr)
		require.True(t, c.Local.AllowRemote, addr)
	}
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.2:0", "localhost:8080", "LOCALHOST:1", "[::1]:8080", ""} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", "HTTP_ADDR": addr}))
		require.NoError(t, err, addr)
	}
}

// A variable with a prefix only this system reads that no component reads is refused at start,
// naming it and the variables of its prefix: a typo (AGENT_BATCHSIZE=5 for AGENT_BATCH_SIZE) was
// ignored, and the agent claimed its default 50 without a word. Variables of other prefixes
// (PATH, DB_ of the machine's own, AWS_) are none of its business.
func TestUnknownVariablesOfOwnedPrefixesAreRefused(t *testing.T) {
	t.Parallel()
	environ := []string{"DB_DSN=u:p@tcp(h:3306)/d", "AGENT_BATCHSIZE=5", "WEBHOOK_SECRETT=x", "SWEEP_GRACE=0",
		"PATH=/bin", "DB_SOMETHING_ELSE=1", "AWS_PROFILE=x", "HOME="}
	m := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	_, err := config.LoadEnvironOf(env(m), environ)
	require.Error(t, err)
	require.Contains(t, err.Error(), "AGENT_BATCHSIZE is not a variable of this system")
	require.Contains(t, err.Error(), "AGENT_BATCH_SIZE, AGENT_EXPIRATION")
	require.Contains(t, err.Error(), "WEBHOOK_SECRETT is not a variable of this system")
	for _, other := range []string{"SWEEP_GRACE is", "PATH", "DB_SOMETHING_ELSE", "AWS_PROFILE", "HOME"} {
		require.NotContains(t, err.Error(), other)
	}

	// Every variable the configuration reads, set, is known; and so set to nothing is refused as
	// LoadChecked refuses it (a number set to nothing), through LoadEnvironOf's own reading of what is set.
	_, err = config.LoadEnvironOf(env(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d"}), []string{"DB_DSN=u:p@tcp(h:3306)/d", "AGENT_BATCH_SIZE="})
	require.ErrorContains(t, err, "AGENT_BATCH_SIZE is set but empty")
	known := []string{"DB_DSN=u:p@tcp(h:3306)/d"}
	for _, k := range []string{"AGENT_NAME", "AGENT_PULSE_INTERVAL", "AGENT_EXPIRATION", "AGENT_POLL_INTERVAL", "AGENT_BATCH_SIZE",
		"SWEEP_BATCH_SIZE", "SWEEP_GRACE", "SWEEP_INTERVAL", "SWEEPER_SHARDS", "WEBHOOK_TIMEOUT", "WEBHOOK_ALLOW_LOOPBACK",
		"WEBHOOK_ALLOW_PRIVATE", "VISIBILITY_HEARTBEAT", "IDEMPOTENCY_TTL", "IDEMPOTENCY_WAIT", "IDEMPOTENCY_REQUIRED",
		"HISTORY_BUCKET", "MAPPING_CONCURRENCY", "MAPPING_BATCH_SIZE", "RETRY_BASE", "RETRY_MAX", "WORKER_MAX_REFERENCES",
		"WORKER_RETENTION", "ALLOCATOR_BLOCK_SIZE", "ALLOCATOR_BLOCK_MAX_AGE", "PROCESSOR_TIMEOUT", "ASYNC_LINGER", "WEBHOOK_API_HOSTS"} {
		known = append(known, k+"=")
	}
	_, err = config.LoadEnvironOf(env(map[string]string{"DB_DSN": "u:p@tcp(h:3306)/d"}), known)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "not a variable of this system")
}

// The counter service's publisher, which wire.CounterPublisher reads: COUNTER_TOPIC_ARN (the stack
// sets it on the counter function and the sweeper) must be an SNS topic's ARN and
// COUNTER_RESULTS_URL a queue's URL, and a COUNTER_ variable no component reads is refused like the
// other prefixes'. They were read outside this parser: COUNTER_TOPIC_ARN=counter-results was
// accepted, leaving every publish of the counter function, and the sweeper's republish, to fail;
// COUNTER_TOPIC_ARM=... was ignored.
func TestCounterPublisherVariables(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:sns:eu-west-1:123456789012:ExactlyOnce-counter-results"
	c, err := config.Load(env(map[string]string{"DB_DSN": "d", "COUNTER_TOPIC_ARN": arn}))
	require.NoError(t, err)
	require.Equal(t, arn, c.Counter.TopicARN)
	c, err = config.Load(env(map[string]string{"DB_DSN": "d", "COUNTER_RESULTS_URL": "http://127.0.0.1:4100/000000000000/counter-results"}))
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:4100/000000000000/counter-results", c.Counter.ResultsURL)
	for k, v := range map[string]string{"COUNTER_TOPIC_ARN": "counter-results", "COUNTER_RESULTS_URL": "counter-results"} {
		_, err := config.Load(env(map[string]string{"DB_DSN": "d", k: v}))
		require.ErrorContains(t, err, k+" must be", "%s=%s", k, v)
	}
	_, err = config.Load(env(map[string]string{"DB_DSN": "d", "COUNTER_TOPIC_ARN": "arn:aws:sqs:eu-west-1:123456789012:counters"}))
	require.ErrorContains(t, err, "COUNTER_TOPIC_ARN must be", "a queue's ARN is not a topic's")
	environ := []string{"DB_DSN=d", "COUNTER_TOPIC_ARM=" + arn}
	_, err = config.LoadEnvironOf(env(map[string]string{"DB_DSN": "d", "COUNTER_TOPIC_ARM": arn}), environ)
	require.ErrorContains(t, err, "COUNTER_TOPIC_ARM is not a variable of this system")
	require.ErrorContains(t, err, "COUNTER_RESULTS_URL, COUNTER_TOPIC_ARN")
}
