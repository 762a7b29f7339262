package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/rie"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// The api function's init builds no SQS client: a create that is not async, a read, never sends,
// and the cold start paid for the AWS configuration and the client (docs/performance.md, "Lambda
// start-up"). The client is built at the first send. Nor the archive's S3 client (HISTORY_BUCKET),
// built at the first read of an archived page. Shown with an AWS configuration that cannot be
// loaded (rie.UnloadableAWS: AWS_MAX_ATTEMPTS=x): the bootstrap, run as Lambda runs it, answers a
// read, then an async create, whose message is not sent, for that reason, and whose event is left
// to the sweeper as for any failed send. Before, init loaded the configuration and failed, and with
// it every invocation.
func TestTheAPIBuildsItsClientsAtTheirFirstCall(t *testing.T) {
	t.Parallel()
	_, dsn := testdb.DB(t, 2)
	f := rie.StartTest(t, "api", append([]string{"DB_DSN=" + dsn, "DB_MIGRATE=false", "LOG_LEVEL=info",
		"QUEUE_URL=http://127.0.0.1:9/000000000000/events"}, rie.UnloadableAWS...)...)
	call := func(sample string, status int) rie.Result {
		t.Helper()
		res := f.InvokeSample(t, sample)
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

// A setting that the functions' AWS configuration does not read (internal/awsenv: shared files and
// profiles, web identity, assumed roles, FIPS and dual-stack endpoints, ...) fails the init, named,
// rather than being ignored: the bootstrap, run as Lambda runs it with AWS_PROFILE and
// AWS_USE_FIPS_ENDPOINT set, exits before it asks for work, and the emulator reports the init's
// failure with the variables' names in the function's output.
func TestTheAPIRefusesAnAWSSettingItDoesNotRead(t *testing.T) {
	t.Parallel()
	_, dsn := testdb.DB(t, 2)
	f := rie.StartTest(t, "api", "DB_DSN="+dsn, "DB_MIGRATE=false", "AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_PROFILE=deploy", "AWS_USE_FIPS_ENDPOINT=true")
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout+time.Minute)
	defer cancel()
	res, err := f.Invoke(ctx, []byte(`{}`), "")
	require.NoError(t, err)
	require.NotNil(t, res.Error, "the init failed: %s", res.Payload)
	out := strings.Join(f.Output(), "\n")
	require.Contains(t, out, "startup failed")
	require.Contains(t, out, "AWS_PROFILE, AWS_USE_FIPS_ENDPOINT", out)
}
