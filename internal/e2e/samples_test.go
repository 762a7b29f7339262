// Package e2e tests the system end to end: the events/ samples through the handlers the Lambdas run,
// and the whole local system through HTTP and the SQS protocol, on a real database.
package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/migration"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func sample[T any](t *testing.T, name string) T {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repo.Root(), "events", name))
	require.NoError(t, err)
	var v T
	require.NoError(t, json.Unmarshal(raw, &v), name)
	return v
}

func body(t *testing.T, resp events.APIGatewayProxyResponse) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &m), resp.Body)
	return m
}

// Every sample in events/ is valid input for the handler it belongs to, and gets the answer the
// contract promises. The samples are what `sam local invoke -e` and `make invoke` feed the functions.
func TestSamplesThroughTheLambdaHandlers(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	ctx := context.Background()
	apiHandler := httpadapter.New(openapitest.Handler(t, &api.Server{Stores: store.API(), Queue: &queue.SQSSender{Client: client, QueueURL: q.URL},
		AsyncGroup: api.AsyncGroup{Inline: true}})).ProxyWithContext // as functions/api wires it

	resp, err := apiHandler(ctx, sample[events.APIGatewayProxyRequest](t, "api-post-events.json"))
	require.NoError(t, err)
	require.Equal(t, 201, resp.StatusCode, resp.Body)
	require.EqualValues(t, 1, body(t, resp)["id"], "a fresh database hands out id 1 first")

	resp, err = apiHandler(ctx, sample[events.APIGatewayProxyRequest](t, "api-post-events-async.json"))
	require.NoError(t, err)
	require.Equal(t, 202, resp.StatusCode, resp.Body)
	require.EqualValues(t, 2, body(t, resp)["id"])

	resp, err = apiHandler(ctx, sample[events.APIGatewayProxyRequest](t, "api-get-events.json"))
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.EqualValues(t, 2, body(t, resp)["count"])

	resp, err = apiHandler(ctx, sample[events.APIGatewayProxyRequest](t, "api-get-event.json"))
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.EqualValues(t, 1, body(t, resp)["id"])
	require.Equal(t, "application/json", resp.MultiValueHeaders["Content-Type"][0])

	// The SQS sample names event 2 (pending), event 1 again (a redelivered message: already settled)
	// and carries one corrupted message. Its record of task 3 is left out here (no task was created:
	// TestBootstrapsUnderTheRuntimeInterfaceEmulator sends the whole batch after the task's create).
	sqsEvent := sample[events.SQSEvent](t, "processor-batch.json")
	require.JSONEq(t, `{"id":3}`, sqsEvent.Records[1].Body)
	sqsEvent.Records = slices.Delete(sqsEvent.Records, 1, 2)
	ledger := verify.NewLedger() // the processor and the sweeper report what they settle
	presp, err := (&processing.Processor{Engine: processing.Engine{Store: store.Events, TaskStore: store.Tasks, Report: ledger}}).Handle(ctx, sqsEvent)
	require.NoError(t, err)
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: sqsEvent.Records[2].MessageId}}, presp.BatchItemFailures)
	e, err := store.Events.Get(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, e.State)

	pendingID, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	// The scheduled rule's default event carries no shard: the invocation is shard 0's agent
	// (sweeping.ShardInput), claiming until AgentStopBefore ahead of its deadline.
	sweeper := sweeping.New(store.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), Engine: processing.Engine{Report: ledger},
		Logger: testLogger(), AgentStopBefore: time.Second,
		Agent: agents.Config{Member: agents.MemberConfig{PulseInterval: 50 * time.Millisecond, Expiration: time.Second},
			PollInterval: 20 * time.Millisecond}})
	// It must settle the event: a window of 5 s, as a pulse can wait seconds for a database a
	// parallel suite holds (with 1.8 s, a scheduled sweeper's invocation saw no pulse succeed).
	ictx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	sresp, err := sweeper.HandleAgent(ictx, sample[sweeping.ShardInput](t, "sweeper-scheduled.json"))
	require.NoError(t, err)
	require.Equal(t, 1, sresp.Processed)
	e, err = store.Events.Get(ctx, pendingID)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.BySweeper, e.ProcessedBy)
	// Event 1 born settled and reported by no worker; 2 and the pending one each reported once.
	perPath := requireSettledOnce(t, store, ledger, []int64{1, 2, pendingID})
	require.Equal(t, map[string]int{exactlyonce.ByAPI: 1, exactlyonce.ByProcessor: 1, exactlyonce.BySweeper: 1}, perPath)

	raw, err := os.ReadFile(filepath.Join(repo.Root(), "events", "migrate.json"))
	require.NoError(t, err)
	mres, err := (&migration.Handler{Open: func(context.Context) (*mysql.DB, error) { return store.DB, nil }, Logger: testLogger()}).
		Handle(ctx, raw)
	require.NoError(t, err)
	require.Equal(t, mysql.LatestVersion(), mres.Version)
}

func TestMigrateHandlerFailsTheDeployWhenARuleIsBroken(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := store.DB.Pool().ExecContext(ctx, "ALTER TABLE status ADD PRIMARY KEY (id)")
	require.NoError(t, err)
	_, err = (&migration.Handler{Open: func(context.Context) (*mysql.DB, error) { return store.DB, nil }, Logger: testLogger()}).
		Handle(ctx, json.RawMessage(`{}`))
	require.ErrorContains(t, err, "schema rules broken")
	require.ErrorContains(t, err, "status.PRIMARY")
}
