package e2e

import (
	"context"
	"encoding/base64"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The end-to-end flows of flows.go against the local system (the API over HTTP, the processor
// behind the local event source mapping, the sweeper), on goaws and MariaDB. The LocalStack tests
// (localstack/e2e_test.go) run the same flows through LocalStack.
func TestFlowsAgainstTheLocalSystem(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 1, 2)
	sys := startSystem(t, q, store, 2*time.Second)
	tg := Target{APIURL: sys.URL, SQS: client, QueueURL: q.URL, DLQURL: q.DLQURL,
		Settle: 30 * time.Second, PoisonSettle: 30 * time.Second, Exclusive: true}
	t.Run("creates", func(t *testing.T) { FlowCreates(t, tg, 8, 10) })
	t.Run("duplicate messages", func(t *testing.T) { FlowDuplicateMessages(t, tg) })
	t.Run("poison", func(t *testing.T) { FlowPoison(t, tg) })
	// The flows saw each event's process_count through the API (all a deployed target shows); here
	// the processor's and the sweeper's own reports say each event was settled once.
	sys.requireSettledOnce(t)
}

// The task, counter and agent flows of flows_tasks.go against the local system on goaws (its own
// endpoint: the counter service's queues and topic have fixed names) and MariaDB: tasks to a
// loopback receiver, counters through goaws's SNS topic to the results queue, the sweeper's agent;
// then a second system with no queue consumer, whose async events only agents process.
func TestTaskCounterAndAgentFlowsAgainstTheLocalSystem(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := localsqs.Start("")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	client := localsqs.NewClient(srv.URL)
	awsCfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")}
	counters, err := local.EnsureCounters(ctx, client, awsCfg, srv.URL, testLogger())
	require.NoError(t, err)
	start := func(name string, mapping *int) Target {
		store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
		q, err := queue.Ensure(ctx, client, queue.QueueSpec{Name: name, VisibilityTimeout: 1, MaxReceiveCount: 2})
		require.NoError(t, err)
		opt := local.Options{HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, Queues: q, SweepInterval: 100 * time.Millisecond, MappingConcurrency: mapping,
			Sweep: sweeping.Config{Grace: new(time.Second), Logger: testLogger()}, Engine: processing.Engine{Tasks: testTasks()},
			Webhook: webhook.Policy{AllowLoopback: true}}
		if mapping == nil {
			opt.Counters = counters
		}
		sctx, stop := context.WithCancel(ctx)
		sys, err := local.Start(sctx, store, client, opt, testLogger())
		require.NoError(t, err)
		t.Cleanup(func() { stop(); _ = sys.Wait() })
		return Target{APIURL: sys.URL, SQS: client, QueueURL: q.URL, DLQURL: q.DLQURL, Settle: 60 * time.Second}
	}

	tg := start("events", nil)
	tg.Receiver = NewReceiver(t, "whsec_"+base64.StdEncoding.EncodeToString(testKey), nil, "")
	tg.CounterQueueURL, tg.CounterResultsURL = counters.Queues.URL, counters.ResultsURL
	t.Run("tasks", func(t *testing.T) { FlowTasks(t, tg) })
	t.Run("counters", func(t *testing.T) { FlowCounters(t, tg) })
	t.Run("agents", func(t *testing.T) { FlowAgents(t, tg) })

	agentsOnly := start("events-agents-only", new(0))
	agentsOnly.AgentsOnly = true
	t.Run("agents only", func(t *testing.T) { FlowAgents(t, agentsOnly) })
}
