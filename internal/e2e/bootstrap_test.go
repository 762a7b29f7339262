package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
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
	"github.com/exactlyonce/exactlyonce/internal/rie"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// The real binaries under the real emulator: each function's bootstrap, built as it is deployed
// (GOOS=linux, CGO_ENABLED=0, -tags lambda.norpc; for this machine's architecture), runs under AWS's
// Lambda Runtime Interface Emulator (internal/rie) and answers every sample of events/ as the
// contract says, on one fresh database: migrate, then the API's routes (plain events, a task, the
// listings, the counters), the sweeper (the task fails for good), the task's retry, the
// processor's batch (the task delivered; a redelivered and a malformed record), the counter batch. Every invocation's log lines carry
// its request id. `make invoke` does the same by hand.
func TestBootstrapsUnderTheRuntimeInterfaceEmulator(t *testing.T) {
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
			p, err := rie.BuildBootstrap(ctx, repo.Root(), fn, dir)
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

	// The receiver of the sample task: 410 Gone to the first delivery (a permanent failure), 204 to
	// the ones after. Each delivery's signature is checked with the Standard Webhooks library.
	key := []byte("exactlyonce-bootstrap-test-signing-key-01234")
	wh, err := standardwebhooks.NewWebhookRaw(key)
	require.NoError(t, err)
	var deliveries []string // webhook-ids
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := wh.Verify(body, req.Header); err != nil {
			t.Errorf("signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		deliveries = append(deliveries, req.Header.Get("webhook-id"))
		n := len(deliveries)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusGone)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)

	// An empty database, not migrated: the migrate function does it, as the deploy's Trigger.
	dsn := testdb.NewDatabase(t)
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	results := localsqs.Queues(t, client, 30, 5) // the counter service's notifications
	env := []string{"DB_DSN=" + dsn, "DB_MIGRATE=false", "QUEUE_URL=" + q.URL,
		"AWS_ENDPOINT_URL_SQS=" + localsqs.Endpoint(t), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"SWEEP_GRACE=1ms", "LOG_LEVEL=info", "WEBHOOK_ALLOW_LOOPBACK=true",
		// A worker starts a delivery only with a whole delivery timeout left before its deadline: 2 s
		// fits in the 4 s the test's sweeper works.
		"WEBHOOK_TIMEOUT=2s",
		"WEBHOOK_SECRET=whsec_" + base64.StdEncoding.EncodeToString(key), "COUNTER_RESULTS_URL=" + results.URL}

	used := map[string]bool{} // the samples sent
	type invocation struct {
		fn     *rie.Function
		sample string
		res    rie.Result
	}
	var invocations []invocation
	startFn := func(name string, timeout time.Duration, env []string) *rie.Function {
		f, err := rie.Start(rie.Config{Bootstrap: bootstraps[name], Function: name, Env: env, Timeout: timeout,
			Output: testLogWriterFor(t, name)})
		require.NoError(t, err)
		t.Cleanup(f.Stop)
		return f
	}
	invoke := func(f *rie.Function, sample string) rie.Result {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(repo.Root(), "events", sample))
		require.NoError(t, err)
		// The sample's receiver, on loopback port 9000 (cmd/receiver's), is this test's.
		raw = bytes.ReplaceAll(raw, []byte("http://127.0.0.1:9000/hook"), []byte(recv.URL+"/hook"))
		used[sample] = true
		// A bound, not a pause: the invocation returns as soon as the function answers, and the
		// emulator stops it at its timeout.
		ictx, cancel := context.WithTimeout(ctx, f.Timeout+time.Minute)
		defer cancel()
		res, err := f.Invoke(ictx, raw, "")
		require.NoError(t, err)
		require.Nil(t, res.Error, "%s: %v", sample, res.Error)
		invocations = append(invocations, invocation{f, sample, res})
		return res
	}
	apiCall := func(f *rie.Function, sample string, status int, body string) map[string]any {
		t.Helper()
		var resp events.APIGatewayProxyResponse
		res := invoke(f, sample)
		require.NoError(t, json.Unmarshal(res.Payload, &resp), string(res.Payload))
		require.Equal(t, status, resp.StatusCode, "%s: %s", sample, resp.Body)
		require.Contains(t, resp.Body, body, sample)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(resp.Body), &m), resp.Body)
		return m
	}

	res := invoke(startFn("migrate", migrateTimeout, env), "migrate.json")
	var migrated struct {
		Version int `json:"version"`
	}
	require.NoError(t, json.Unmarshal(res.Payload, &migrated), string(res.Payload))
	require.Equal(t, mysql.LatestVersion(), migrated.Version)

	api := startFn("api", 30*time.Second, env) // one execution environment throughout (warm)
	apiCall(api, "api-post-events.json", 201, `"id":1`)
	apiCall(api, "api-post-events-async.json", 202, `{"id":2}`)
	apiCall(api, "api-post-task.json", 202, `{"id":3}`)
	apiCall(api, "api-get-events.json", 200, `{"count":3}`)
	apiCall(api, "api-get-event.json", 200, `"id":1`)
	apiCall(api, "api-get-event-bad-id.json", 400, `event id must be a positive integer`)
	require.Contains(t, api.Report(invocations[1].res.RequestID), "Init Duration", "the first invocation inits the environment")
	require.NotContains(t, api.Report(invocations[len(invocations)-1].res.RequestID), "Init Duration", "the others find it warm")

	// The sweeper settles event 2 and delivers task 3, which fails for good at once (410). It is an
	// agent for its whole invocation, until sweeping.DefaultAgentStopBefore ahead of its deadline: a
	// 14 s invocation runs for 6 s, its start included (room for a database a parallel suite
	// stalls for seconds: its pulses and its claims must get work done).
	res = invoke(startFn("sweeper", 14*time.Second, env), "sweeper-scheduled.json")
	var swept sweeping.Result
	require.NoError(t, json.Unmarshal(res.Payload, &swept), string(res.Payload))
	require.Equal(t, 1, swept.Processed, string(res.Payload))
	require.True(t, swept.Stopped, string(res.Payload))
	require.Zero(t, swept.PulseFailures, string(res.Payload))
	require.GreaterOrEqual(t, swept.Folded, int64(1), string(res.Payload))

	// The task's attempt, the failed listing, the retry.
	attempts := apiCall(api, "api-get-event-attempts.json", 200, `"status":410`)
	require.Len(t, attempts["attempts"], 1)
	failed := apiCall(api, "api-get-events-by-state.json", 200, `"state":"failed"`)
	require.Len(t, failed["events"], 1)
	apiCall(api, "api-post-event-retry.json", 200, `"state":"pending"`)

	// The processor's batch: event 2 (settled: acknowledged), task 3 (retried: delivered, 204), a
	// redelivered message naming event 1 (settled by the API: acknowledged, nothing done again) and a
	// corrupted message, the only one reported.
	batch := sample[events.SQSEvent](t, "processor-batch.json")
	require.Equal(t, "2", batch.Records[2].Attributes["ApproximateReceiveCount"], "the sample's redelivered record")
	var sqsResp events.SQSEventResponse
	require.NoError(t, json.Unmarshal(invoke(startFn("processor", 30*time.Second, env), "processor-batch.json").Payload, &sqsResp))
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: batch.Records[3].MessageId}}, sqsResp.BatchItemFailures)
	apiCall(api, "api-get-reference-events.json", 200, `"state":"completed"`)
	retried := apiCall(api, "api-post-reference-retry.json", 200, `"referenceId":"customer-42"`)
	require.Empty(t, retried["retried"], "nothing of the reference has failed")
	mu.Lock()
	require.Len(t, deliveries, 2)
	require.Equal(t, deliveries[0], deliveries[1], "a retried task is delivered with its webhook-id")
	mu.Unlock()

	// The counter function: the counter sample's messages (the SQS-triggered Lambda of the counter
	// service), its notifications published to a queue (COUNTER_RESULTS_URL; on AWS the stack sets
	// COUNTER_TOPIC_ARN). The poison and the malformed messages alone are reported; the others are
	// applied in order, the redelivered duplicate included, and each gets one notification.
	counterBatch := sample[events.SQSEvent](t, "counter-batch.json")
	var counterResp events.SQSEventResponse
	require.NoError(t, json.Unmarshal(invoke(startFn("counter", 30*time.Second, env), "counter-batch.json").Payload, &counterResp))
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: counterBatch.Records[6].MessageId},
		{ItemIdentifier: counterBatch.Records[7].MessageId}}, counterResp.BatchItemFailures)
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
	// msg-1 and msg-2 added, msg-1 read: one counted, after three changes.
	apiCall(api, "api-get-counter.json", 200, `{"userId":"alice","entityType":"message","sum":1,"version":3}`)
	apiCall(api, "api-get-counters.json", 200, `"message":{"sum":1,"version":3}`)

	overview := apiCall(api, "api-get-overview.json", 200, `"events"`)
	require.EqualValues(t, 3, overview["events"].(map[string]any)["total"])
	history := apiCall(api, "api-get-history.json", 200, `"pages"`)
	require.EqualValues(t, 3, history["total"], "the history by tier adds up to the count")
	apiCall(api, "api-get-agents.json", 200, `"agents"`)
	apiCall(api, "api-get-workers.json", 200, `"workers"`)
	apiCall(api, "api-get-worker.json", 404, `no event worker`)

	// Every sample in events/ was sent, and every invocation's log lines carry its request id: the
	// emulator's START and REPORT lines, and each JSON line the function wrote (its logs and its EMF
	// line) between them.
	all, err := filepath.Glob(filepath.Join(repo.Root(), "events", "*.json"))
	require.NoError(t, err)
	var unused []string
	for _, p := range all {
		if !used[filepath.Base(p)] {
			unused = append(unused, filepath.Base(p))
		}
	}
	require.Empty(t, unused, "samples in events/ that no test through the emulator sends")
	for _, inv := range invocations {
		logs := inv.fn.Logs(inv.res.RequestID)
		require.NotEmpty(t, logs, "%s: no START line for %s", inv.sample, inv.res.RequestID)
		require.True(t, strings.HasPrefix(logs[len(logs)-1], "REPORT RequestId: "+inv.res.RequestID), "%s: %q", inv.sample, logs)
		// The emulator inits an environment in its first invocation, after its START line (Lambda,
		// before): the lines the bootstrap writes at start-up belong to no request.
		cold := strings.Contains(logs[len(logs)-1], "Init Duration")
		var records, tagged int
		for _, l := range logs {
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) != nil {
				continue
			}
			if _, emf := rec["_aws"]; emf {
				continue // the metrics line: CloudWatch knows its request from where it is
			}
			records++
			if id, ok := rec["requestId"]; ok || !cold {
				require.Equal(t, inv.res.RequestID, id, "%s: a log line without the invocation's request id: %s", inv.sample, l)
				tagged++
			}
		}
		if records > 0 {
			require.Positive(t, tagged, "%s: no log line of the invocation carries its request id: %q", inv.sample, logs)
		}
	}

	// The rows: three events, each settled once by its path (event 2 by the sweeper, though a
	// message named it after; task 3 completed by the processor after the sweeper failed it).
	db, err := mysql.Open(mysql.ConnConfig{DSN: dsn})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	e, err := store.Events.Get(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.BySweeper, e.ProcessedBy)
	require.Equal(t, 1, e.ProcessCount)
	audit, err := mysqltest.AuditEvents(ctx, store.DB.Pool())
	require.NoError(t, err)
	require.Len(t, audit, 3, "three events, one row each")
	// The bootstraps are the deployed binaries: they cannot report their settlements to a test, so
	// the checker names the two events workers settled as settled by claims no worker vouched for.
	// That the same handlers settle exactly once is shown by their reports in
	// TestSamplesThroughTheLambdaHandlers.
	chk := verify.Check(audit, verify.NewLedger())
	require.Zero(t, chk.Reported, chk.String())

	// The deadline is the function's timeout ahead: with 4 s, less than the sweeper agent's margin
	// (8 s) remains, so it does not even join. (Not 1 s: the start of a process on a loaded machine
	// counts against it, and the emulator would end an invocation that outlasted it.)
	res = invoke(startFn("sweeper", 4*time.Second, env), "sweeper-scheduled.json")
	require.JSONEq(t, `{"processed":0,"retrying":0,"failed":0,"batches":0,"folded":0,"stoppedForDeadline":true}`, string(res.Payload))

	// A function that cannot start (no database configured) is reported as Lambda does.
	noDB := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "DB_DSN=") })
	broken := startFn("api", 30*time.Second, noDB)
	raw, err := os.ReadFile(filepath.Join(repo.Root(), "events", "api-get-events.json"))
	require.NoError(t, err)
	res, err = broken.Invoke(ctx, raw, "")
	require.NoError(t, err)
	require.NotNil(t, res.Error)
	require.Equal(t, "Runtime.ExitError", res.Error.Type, res.Error.Message)
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
