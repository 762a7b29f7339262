// Integration tests through LocalStack: the end-to-end flows of internal/e2e (flows.go and
// flows_tasks.go: plain events, tasks, counters and their SNS notifications, agents; the same flows
// CI runs against goaws and MariaDB) against LocalStack's SQS and SNS and the compose MySQL, and
// against the stack deployed into LocalStack (API Gateway, Lambda, the SQS event source mappings,
// EventBridge, Secrets Manager). When LocalStack does not answer, the package says so in one line
// and runs nothing (TestMain); a test whose database or deployed stack is missing skips, saying
// what to start. See TESTING.md.
//
//	docker compose -f localstack/docker-compose.yml up -d --wait
//	make test-localstack
package localstack_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/e2e"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/secrets"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

const howToStart = "start it with `docker compose -f localstack/docker-compose.yml up -d --wait` (see localstack/TESTING.md)"

// TestMain runs nothing, and says why in one line, when LocalStack does not answer (no Docker, as on
// the machines `make test` runs on).
func TestMain(m *testing.M) {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := localsqs.NewClient(endpoint()).ListQueues(ctx, &sqs.ListQueuesInput{}, func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
	cancel()
	if err != nil {
		fmt.Printf("localstack: skipped, LocalStack does not answer at %s (%v); %s\n", endpoint(), err, howToStart)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// endpoint is LocalStack's edge endpoint: LOCALSTACK_ENDPOINT, default http://127.0.0.1:4566.
func endpoint() string { return cmp.Or(os.Getenv("LOCALSTACK_ENDPOINT"), "http://127.0.0.1:4566") }

// requireLocalStack returns an SQS client for LocalStack, or skips the test if it does not answer.
func requireLocalStack(t *testing.T) *sqs.Client {
	t.Helper()
	client := localsqs.NewClient(endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := client.ListQueues(ctx, &sqs.ListQueuesInput{}); err != nil {
		t.Skipf("LocalStack is not reachable at %s (%v): %s", endpoint(), err, howToStart)
	}
	return client
}

// database creates a database for the test on the compose MySQL (LOCALSTACK_DB_ADMIN_DSN, default
// its root user on 127.0.0.1:3306), migrated, or skips if the server does not answer.
func database(t *testing.T) *wire.Stores {
	t.Helper()
	cfg, err := drv.ParseDSN(cmp.Or(os.Getenv("LOCALSTACK_DB_ADMIN_DSN"), "root:root@tcp(127.0.0.1:3306)/"))
	require.NoError(t, err)
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		t.Skipf("the compose MySQL is not reachable at %s (%v): %s", cfg.Addr, err, howToStart)
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name := "ls_" + hex.EncodeToString(b)
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name) })
	cfg.DBName = name
	db, err := mysql.Open(mysql.ConnConfig{DSN: cfg.FormatDSN(), MaxOpenConns: 8})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, mysql.Migrate(context.Background(), db))
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	return store
}

// The local system (API, processor behind the local event source mapping, sweeper) on LocalStack's
// SQS and the compose MySQL: the flows CI runs on goaws and MariaDB, on the other implementations.
func TestFlowsOnLocalStackServices(t *testing.T) {
	client := requireLocalStack(t)
	store := database(t)
	ctx := context.Background()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	q, err := queue.Ensure(ctx, client, queue.QueueSpec{Name: "e2e-" + hex.EncodeToString(b), VisibilityTimeout: 2, MaxReceiveCount: 2})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.URL)})
		_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.DLQURL)})
	})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sctx, cancel := context.WithCancel(ctx)
	sys, err := local.Start(sctx, store, client, local.Options{HTTPAddr: "127.0.0.1:0", Queues: q,
		SweepInterval: 500 * time.Millisecond, Sweep: sweeping.Config{Grace: new(5 * time.Second), Logger: quiet}}, quiet)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); _ = sys.Wait() })

	tg := e2e.Target{APIURL: sys.URL, SQS: client, QueueURL: q.URL, DLQURL: q.DLQURL,
		Settle: 60 * time.Second, PoisonSettle: 90 * time.Second, Exclusive: true}
	t.Run("creates", func(t *testing.T) { e2e.FlowCreates(t, tg, 8, 10) })
	t.Run("duplicate messages", func(t *testing.T) { e2e.FlowDuplicateMessages(t, tg) })
	t.Run("poison", func(t *testing.T) { e2e.FlowPoison(t, tg) })
}

// The task, counter and agent flows on LocalStack's SQS and SNS and the compose MySQL: the local
// system delivers tasks to a receiver on loopback, the counter service publishes to a LocalStack
// topic subscribed by a queue (local.EnsureCounters), and a second system with no queue consumer
// leaves its async events to its sweeper's agent.
func TestTaskCounterAndAgentFlowsOnLocalStackServices(t *testing.T) {
	client := requireLocalStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	awsCfg := aws.Config{Region: cmp.Or(os.Getenv("AWS_REGION"), "us-east-1"),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
	counters, err := local.EnsureCounters(ctx, client, awsCfg, endpoint(), quiet)
	require.NoError(t, err)
	key := []byte("exactlyonce-localstack-test-signing-key-0123")
	start := func(mapping *int) e2e.Target {
		store := database(t)
		q, err := queue.Ensure(ctx, client, queue.QueueSpec{Name: "e2e-" + hex.EncodeToString(key[:2]) + fmt.Sprint(time.Now().UnixNano()),
			VisibilityTimeout: 2, MaxReceiveCount: 2})
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.URL)})
			_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.DLQURL)})
		})
		opt := local.Options{HTTPAddr: "127.0.0.1:0", Queues: q, SweepInterval: 500 * time.Millisecond, MappingConcurrency: mapping,
			Sweep: sweeping.Config{Grace: new(time.Second), Logger: quiet},
			Engine: processing.Engine{Tasks: &processing.Tasks{Deliverer: webhook.New(webhook.Config{Key: key, AllowLoopback: true, Timeout: 5 * time.Second}),
				RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}},
			Webhook: webhook.Policy{AllowLoopback: true}}
		if mapping == nil {
			opt.Counters = counters
		}
		sctx, stop := context.WithCancel(ctx)
		sys, err := local.Start(sctx, store, client, opt, quiet)
		require.NoError(t, err)
		t.Cleanup(func() { stop(); _ = sys.Wait() })
		return e2e.Target{APIURL: sys.URL, SQS: client, QueueURL: q.URL, DLQURL: q.DLQURL, Settle: 60 * time.Second}
	}
	tg := start(nil)
	tg.Receiver = e2e.NewReceiver(t, "whsec_"+base64.StdEncoding.EncodeToString(key), nil, "")
	tg.CounterQueueURL, tg.CounterResultsURL = counters.Queues.URL, counters.ResultsURL
	t.Run("tasks", func(t *testing.T) { e2e.FlowTasks(t, tg) })
	t.Run("counters", func(t *testing.T) { e2e.FlowCounters(t, tg) })
	t.Run("agents", func(t *testing.T) { e2e.FlowAgents(t, tg) })
	agentsOnly := start(new(0))
	agentsOnly.AgentsOnly = true
	t.Run("agents only", func(t *testing.T) { e2e.FlowAgents(t, agentsOnly) })
}

// outputs are the stack outputs `make deploy-localstack` writes (cdk deploy --outputs-file).
type outputs struct {
	APIURL, QueueURL, DLQURL         string
	CounterQueueURL, CounterTopicARN string
	WebhookSecretARN                 string
}

func deployed(t *testing.T) outputs {
	t.Helper()
	path := cmp.Or(os.Getenv("LOCALSTACK_OUTPUTS"), filepath.Join("..", "build", "cdk-outputs.localstack.json"))
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("no deployed stack: %v (deploy it with `make deploy-localstack`, see localstack/README.md)", err)
	}
	var stacks map[string]map[string]string
	require.NoError(t, json.Unmarshal(raw, &stacks), path)
	for _, o := range stacks {
		if o["ApiUrl"] != "" {
			return outputs{APIURL: cmp.Or(os.Getenv("LOCALSTACK_API_URL"), strings.TrimSuffix(o["ApiUrl"], "/")),
				QueueURL: o["QueueUrl"], DLQURL: o["DeadLetterQueueUrl"],
				CounterQueueURL: o["CounterQueueUrl"], CounterTopicARN: o["CounterTopicArn"], WebhookSecretARN: o["WebhookSecretArn"]}
		}
	}
	t.Skipf("%s names no stack with an ApiUrl output", path)
	return outputs{}
}

// The deployed stack: API Gateway (REST) and the api Lambda, the processor Lambda behind the SQS
// event source mapping with ReportBatchItemFailures, the sweeper on its EventBridge rule, the
// compose MySQL. Async events may wait for the sweeper's next minute, hence the long settle.
func TestFlowsOnTheDeployedStack(t *testing.T) {
	client := requireLocalStack(t)
	out := deployed(t)
	tg := e2e.Target{APIURL: out.APIURL, SQS: client, QueueURL: out.QueueURL, DLQURL: out.DLQURL,
		Settle: 3 * time.Minute}
	// The stack's receive limit times its visibility timeout is many minutes: opt in.
	if v := os.Getenv("LOCALSTACK_POISON_SETTLE"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		tg.PoisonSettle = d
	}
	t.Run("creates", func(t *testing.T) { e2e.FlowCreates(t, tg, 4, 5) })
	t.Run("duplicate messages", func(t *testing.T) { e2e.FlowDuplicateMessages(t, tg) })
	t.Run("poison", func(t *testing.T) { e2e.FlowPoison(t, tg) })

	// Counters: the deployed counter function behind its queue's mapping, its notifications on the
	// stack's topic, which a queue of the test's subscribes to.
	if out.CounterQueueURL != "" && out.CounterTopicARN != "" {
		ctx := context.Background()
		results, err := queue.Ensure(ctx, client, queue.QueueSpec{Name: "e2e-results-" + fmt.Sprint(time.Now().UnixNano()),
			VisibilityTimeout: 30, MaxReceiveCount: 5})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(results.URL)}) })
		sns := &counters.SNSPublisher{AWS: aws.Config{Region: cmp.Or(os.Getenv("AWS_REGION"), "us-east-1"),
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}, Endpoint: endpoint(), TopicARN: out.CounterTopicARN}
		require.NoError(t, sns.SubscribeQueue(ctx, results.ARN))
		tg.CounterQueueURL, tg.CounterResultsURL = out.CounterQueueURL, results.URL
	}
	t.Run("counters", func(t *testing.T) { e2e.FlowCounters(t, tg) })

	// Tasks: the deployed processor and sweeper deliver only to public addresses (a deployment sets
	// no WEBHOOK_ALLOW_*), so the receiver must be reachable at a public URL that forwards to it:
	// LOCALSTACK_RECEIVER_URL, served on LOCALSTACK_RECEIVER_ADDR, verifying with the stack's
	// signing secret. Without them the flow skips, saying so.
	if url, addr := os.Getenv("LOCALSTACK_RECEIVER_URL"), os.Getenv("LOCALSTACK_RECEIVER_ADDR"); url != "" && addr != "" && out.WebhookSecretARN != "" {
		t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", endpoint())
		secret, err := secrets.Resolve(context.Background(), out.WebhookSecretARN)
		require.NoError(t, err)
		ln, err := net.Listen("tcp", addr)
		require.NoError(t, err)
		tg.Receiver = e2e.NewReceiver(t, secret, ln, url)
	}
	t.Run("tasks", func(t *testing.T) { e2e.FlowTasks(t, tg) })
	// Agents: the sweeper's invocations (every minute, for most of it) are agents with a range.
	t.Run("agents", func(t *testing.T) { e2e.FlowAgents(t, tg) })
}
