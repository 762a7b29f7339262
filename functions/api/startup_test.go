package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/exactlyonce/exactlyonce/internal/rie"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// The api function's init builds no SQS client: a create that is not async, a read, never sends,
// and the cold start paid for the AWS configuration and the client (docs/performance.md, "Lambda
// start-up"). The client is built at the first send. Nor the archive's S3 client (HISTORY_BUCKET),
// built at the first read of an archived page. Shown with an AWS configuration that cannot be
// loaded (AWS_MAX_ATTEMPTS=x, which config.LoadDefaultConfig refuses): the bootstrap, run as Lambda
// runs it, answers a read, then an async create, whose message is not sent, for that reason, and
// whose event is left to the sweeper as for any failed send. Before, init loaded the configuration
// and failed, and with it every invocation.
func TestTheAPIBuildsItsClientsAtTheirFirstCall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the api function's bootstrap")
	}
	ctx := context.Background()
	bootstrap, err := rie.BuildBootstrap(ctx, repo.Root(), "api", t.TempDir())
	require.NoError(t, err)
	_, dsn := testdb.DB(t, 2)
	f, err := rie.Start(rie.Config{Bootstrap: bootstrap, Function: "api", Timeout: 30 * time.Second,
		Env: []string{"DB_DSN=" + dsn, "DB_MIGRATE=false", "LOG_LEVEL=info",
			"QUEUE_URL=http://127.0.0.1:9/000000000000/events", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:9",
			"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_MAX_ATTEMPTS=x",
			// The archive's S3 client too is built at its first call (wire.Archive), not at init.
			"HISTORY_BUCKET=history", "AWS_ENDPOINT_URL_S3=http://127.0.0.1:9"}})
	require.NoError(t, err)
	t.Cleanup(f.Stop)
	call := func(sample string, status int) rie.Result {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(repo.Root(), "events", sample))
		require.NoError(t, err)
		// A bound, not a pause: the invocation returns as soon as the function answers.
		ictx, cancel := context.WithTimeout(ctx, f.Timeout+time.Minute)
		defer cancel()
		res, err := f.Invoke(ictx, raw, "")
		require.NoError(t, err)
		require.Nil(t, res.Error, "%s: %v\n%s", sample, res.Error, strings.Join(f.Output(), "\n"))
		var resp events.APIGatewayProxyResponse
		require.NoError(t, json.Unmarshal(res.Payload, &resp), string(res.Payload))
		require.Equal(t, status, resp.StatusCode, "%s: %s", sample, resp.Body)
		return res
	}
	call("api-get-events.json", 200)
	res := call("api-post-events-async.json", 202)
	logs := strings.Join(f.Logs(res.RequestID), "\n")
	require.Contains(t, logs, "queue send failed", "the send was tried")
	require.Contains(t, logs, "AWS_MAX_ATTEMPTS", "with the client built then, from the configuration")
}
