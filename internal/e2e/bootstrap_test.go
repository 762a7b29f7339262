package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/exactlyonce/exactlyonce/internal/runtimeapi"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// The real binaries: each function's bootstrap, built as it is deployed (GOOS=linux,
// CGO_ENABLED=0, -tags lambda.norpc; for this machine's architecture), runs against the Lambda
// Runtime API and answers the events/ samples as the contract says. `make invoke` does the same
// by hand.
func TestBootstrapsThroughTheRuntimeAPI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds every function's binary")
	}
	ctx := context.Background()
	dir := t.TempDir()
	functions := []string{"api", "processor", "sweeper", "migrate", "counter"}
	// Every function the repository deploys is built and invoked here: a new one under functions/
	// that this test does not run fails it.
	entries, err := os.ReadDir(filepath.Join(repo.Root(), "functions"))
	require.NoError(t, err)
	var deployed []string
	for _, e := range entries {
		if e.IsDir() {
			deployed = append(deployed, e.Name())
		}
	}
	require.ElementsMatch(t, deployed, functions, "the functions under functions/ and the ones this test runs")
	bootstraps := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(functions))
	start := time.Now()
	for _, fn := range functions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := runtimeapi.BuildBootstrap(ctx, repo.Root(), fn, dir)
			errs <- err
			mu.Lock()
			bootstraps[fn] = p
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("built %d bootstraps in %s", len(functions), time.Since(start).Round(time.Millisecond))

	// An empty database, not migrated: the migrate function does it, as the deploy's Trigger.
	dsn := testdb.NewDatabase(t)
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	env := []string{"DB_DSN=" + dsn, "DB_MIGRATE=false", "QUEUE_URL=" + q.URL,
		"AWS_ENDPOINT_URL_SQS=" + localsqs.Endpoint(t), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"SWEEP_GRACE=1ms", "LOG_LEVEL=warn"}
	start1 := func(fn string, timeout time.Duration, env []string) *runtimeapi.Process {
		p, err := runtimeapi.StartProcess(runtimeapi.ProcessConfig{Bootstrap: bootstraps[fn], Function: fn,
			Env: env, Timeout: timeout, Output: testLogWriterFor(t, fn)})
		require.NoError(t, err)
		t.Cleanup(p.Stop)
		return p
	}
	invoke := func(p *runtimeapi.Process, sample string) runtimeapi.Result {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(repo.Root(), "events", sample))
		require.NoError(t, err)
		// A bound, not a pause: the invocation returns as soon as the function answers, and the
		// longest function timeout here is migrate's.
		ictx, cancel := context.WithTimeout(ctx, migrateTimeout+time.Minute)
		defer cancel()
		res, err := p.Invoke(ictx, raw)
		require.NoError(t, err)
		require.Nil(t, res.Error, "%s: %v", sample, res.Error)
		return res
	}

	res := invoke(start1("migrate", migrateTimeout, env), "migrate.json")
	var migrated struct {
		Version int `json:"version"`
	}
	require.NoError(t, json.Unmarshal(res.Payload, &migrated), string(res.Payload))
	require.Equal(t, mysql.LatestVersion(), migrated.Version)

	api := start1("api", 30*time.Second, env) // one execution environment, invoked four times (warm)
	for _, c := range []struct {
		sample string
		status int
		body   string
	}{
		{"api-post-events.json", 201, `"id":1`},
		{"api-post-events-async.json", 202, `{"id":2}`},
		{"api-get-events.json", 200, `{"count":2}`},
		{"api-get-event.json", 200, `"id":1`},
	} {
		var resp events.APIGatewayProxyResponse
		require.NoError(t, json.Unmarshal(invoke(api, c.sample).Payload, &resp))
		require.Equal(t, c.status, resp.StatusCode, c.sample)
		require.Contains(t, resp.Body, c.body, c.sample)
	}
	require.Positive(t, api.InitDuration())
	t.Logf("api init duration %s", api.InitDuration().Round(time.Microsecond))

	// The SQS sample names event 2 (now pending, queued by the async create) and one corrupted message.
	var sqsResp events.SQSEventResponse
	require.NoError(t, json.Unmarshal(invoke(start1("processor", 30*time.Second, env), "sqs-batch.json").Payload, &sqsResp))
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: "2e1424d4-f796-459a-8184-9c92662be6da"}}, sqsResp.BatchItemFailures)

	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	e, err := store.Events.Get(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.ByProcessor, e.ProcessedBy)

	pendingID, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	// The sweeper is an agent for its whole invocation, until sweeping.DefaultAgentStopBefore ahead of
	// its deadline: a 12 s invocation runs for 4 s.
	res = invoke(start1("sweeper", 12*time.Second, env), "scheduled.json")
	var swept sweeping.Result
	require.NoError(t, json.Unmarshal(res.Payload, &swept), string(res.Payload))
	require.Equal(t, 1, swept.Processed, string(res.Payload))
	require.True(t, swept.Stopped, string(res.Payload))
	require.Zero(t, swept.PulseFailures, string(res.Payload))
	// Between its batches it folds the settled events into the count: at least events 1 and 2,
	// settled before it started (the pending one too if its first fold came after its first batch).
	require.GreaterOrEqual(t, swept.Folded, int64(2), string(res.Payload))
	// The bootstraps are the deployed binaries: they cannot report their settlements to a test (the
	// functions' main packages wire no Reporter, and should not), so this is no exactly-once check.
	// Given no reports, the checker accepts event 1, born settled by the API, and names the two
	// events the processor and the sweeper settled as settled by claims no worker vouched for. What
	// is checked here: three rows, each settled with its value by its function's path, the two
	// workers' under distinct claims; and the functions' own answers (the processor failed only the
	// corrupted message; the sweeper says it settled one event). Not shown: that no second
	// settlement happened and left the table as it is; that the same handlers settle exactly once is
	// shown by their reports in TestSamplesThroughTheLambdaHandlers, which runs these samples through
	// them in process.
	audit, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
	require.NoError(t, err)
	require.Len(t, audit, 3, "three events, one row each")
	chk := verify.Check(audit, verify.NewLedger())
	require.Equal(t, 3, chk.Settled, chk.String())
	require.Equal(t, []int{1, 1, 1}, []int{chk.ByAPI, chk.ByProcessor, chk.BySweeper}, chk.String())
	require.Zero(t, chk.Reported, chk.String())
	claims := map[int64]string{}
	for _, e := range audit {
		claims[e.ID] = e.ClaimID
	}
	require.NotEqual(t, claims[2], claims[pendingID], "the processor's claim and the sweeper's are distinct")
	require.ElementsMatch(t, []string{
		fmt.Sprintf("event 2 was settled by claim %q, which no worker reported starting", claims[2]),
		fmt.Sprintf("event %d was settled by claim %q, which no worker reported starting", pendingID, claims[pendingID]),
	}, chk.Violations, "nothing is wrong but the missing reports of the two settlements by workers")

	// The counter function: the counter sample's seven messages (the SQS-triggered Lambda of the
	// counter service), with its notifications published to a queue (COUNTER_RESULTS_URL; on AWS the
	// stack sets COUNTER_TOPIC_ARN instead). The poison message alone is reported; the others are
	// applied in order, duplicates included, and each gets one notification.
	results := localsqs.Queues(t, client, 30, 5)
	counterEnv := []string{"DB_DSN=" + dsn, "DB_MIGRATE=false", "COUNTER_RESULTS_URL=" + results.URL,
		"AWS_ENDPOINT_URL_SQS=" + localsqs.Endpoint(t), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"LOG_LEVEL=warn"}
	var counterResp events.SQSEventResponse
	require.NoError(t, json.Unmarshal(invoke(start1("counter", 30*time.Second, counterEnv), "counter-batch.json").Payload, &counterResp))
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: "c0unter-0007-4b5e-9a0f-5d3c2b1a0e07"}}, counterResp.BatchItemFailures)
	sum, err := store.Counters.CounterSum(ctx, exactlyonce.CounterKey{EntityType: "message", UserID: "alice"})
	require.NoError(t, err)
	// msg-1 and msg-2 added, msg-1 read: one counted, after three changes (msg-3, read before its
	// add, never counts).
	require.Equal(t, exactlyonce.CounterSum{Sum: 1, Version: 3}, sum)
	notified := map[string]exactlyonce.CounterResult{} // by notification id: a repeat is one
	testutil.Eventually(t, 30*time.Second, "the counter function's six notifications are on the results queue", func() bool {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(results.URL),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		for _, m := range out.Messages {
			var r exactlyonce.CounterResult
			require.NoError(t, json.Unmarshal([]byte(aws.ToString(m.Body)), &r), aws.ToString(m.Body))
			notified[r.ID] = r
		}
		return len(notified) >= 6
	})
	var sequence []string
	for _, r := range notified {
		sequence = append(sequence, fmt.Sprintf("%s %s applied=%t version=%d", r.EntityID, r.Action, r.Applied, r.Version))
	}
	require.ElementsMatch(t, []string{
		"msg-1 added applied=true version=1", "msg-2 added applied=true version=2",
		"msg-1 added applied=false version=2", "msg-1 readed applied=true version=3",
		"msg-3 readed applied=false version=3", "msg-3 added applied=false version=3",
	}, sequence)

	// The deadline header is honoured: with a 1 s function timeout, less than the sweeper agent's
	// margin remains, so it does not even join.
	res = invoke(start1("sweeper", time.Second, env), "scheduled.json")
	require.JSONEq(t, `{"processed":0,"retrying":0,"failed":0,"batches":0,"folded":0,"stoppedForDeadline":true}`, string(res.Payload))

	// A function that cannot start (no database configured) is reported as Lambda does.
	var noDB []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "DB_DSN=") {
			noDB = append(noDB, kv)
		}
	}
	broken := start1("api", 30*time.Second, noDB)
	raw, err := os.ReadFile(filepath.Join(repo.Root(), "events", "api-get-events.json"))
	require.NoError(t, err)
	res, err = broken.Invoke(ctx, raw)
	require.NoError(t, err)
	require.NotNil(t, res.Error)
	require.Equal(t, "Runtime.ExitError", res.Error.Type)
}

// migrateTimeout is the deployed migrate function's timeout (infra/tuning.go): migrating an empty
// database creates some 1,700 partitions, which takes seconds on a quiet machine and more than 30 s
// on a loaded one.
const migrateTimeout = 5 * time.Minute

func testLogWriterFor(t *testing.T, fn string) *lineLogger { return &lineLogger{t: t, prefix: fn} }

// lineLogger sends a function's output to the test log.
type lineLogger struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Logf("%s | %s", l.prefix, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
