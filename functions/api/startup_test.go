package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	rie.SkipShort(t, "api")
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
	rie.SkipShort(t, "api")
	_, dsn := testdb.DB(t, 2)
	f := rie.StartTest(t, "api", "DB_DSN="+dsn, "DB_MIGRATE=false", "AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_PROFILE=deploy", "AWS_USE_FIPS_ENDPOINT=true")
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout+time.Minute)
	defer cancel()
	res, err := f.Invoke(ctx, []byte(`{}`), "")
	require.NoError(t, err)
	require.NotNil(t, res.Error, "the init failed: %s", res.Payload)
	// The bootstrap's last lines may reach the output after the emulator answered.
	require.True(t, f.WaitOutput("AWS_PROFILE, AWS_USE_FIPS_ENDPOINT", 10*time.Second), strings.Join(f.Output(), "\n"))
	out := strings.Join(f.Output(), "\n")
	require.Contains(t, out, "startup failed")
}

// With SnapStart or on managed instances Lambda gives a function no keys but a container credentials
// endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI, AWS_CONTAINER_AUTHORIZATION_TOKEN), which the
// functions' AWS configuration reads (internal/awsenv) as config.LoadDefaultConfig does. The
// bootstrap, run as Lambda runs it with only those, signs its SQS send with the endpoint's
// credentials: the queue (a stand-in that records the signature) sees their key id, and the
// endpoint was asked with the token.
func TestTheAPISignsWithTheContainerCredentials(t *testing.T) {
	t.Parallel()
	rie.SkipShort(t, "api")
	var mu sync.Mutex
	var tokens, signatures []string
	creds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tokens = append(tokens, r.Header.Get("Authorization"))
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"AccessKeyId": "ASIACONTAINER", "SecretAccessKey": "secret",
			"Token": "session", "Expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	}))
	t.Cleanup(creds.Close)
	queue := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		signatures = append(signatures, r.Header.Get("Authorization"))
		mu.Unlock()
		var in struct{ MessageBody string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		sum := md5.Sum([]byte(in.MessageBody))
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_ = json.NewEncoder(w).Encode(map[string]string{"MessageId": "m-1", "MD5OfMessageBody": hex.EncodeToString(sum[:])})
	}))
	t.Cleanup(queue.Close)
	_, dsn := testdb.DB(t, 2)
	f := rie.StartTest(t, "api", "DB_DSN="+dsn, "DB_MIGRATE=false", "LOG_LEVEL=info", "AWS_REGION=us-east-1",
		"QUEUE_URL="+queue.URL+"/000000000000/events", "AWS_ENDPOINT_URL_SQS="+queue.URL,
		"AWS_CONTAINER_CREDENTIALS_FULL_URI="+creds.URL+"/creds", "AWS_CONTAINER_AUTHORIZATION_TOKEN=container-token")
	res := f.InvokeSample(t, "api-post-events-async.json")
	var resp events.APIGatewayProxyResponse
	require.NoError(t, json.Unmarshal(res.Payload, &resp), string(res.Payload))
	require.Equal(t, 202, resp.StatusCode, resp.Body)
	logs := strings.Join(f.Logs(res.RequestID), "\n")
	require.NotContains(t, logs, "queue send failed", logs)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"container-token"}, tokens, "the endpoint asked once, with the token")
	require.Len(t, signatures, 1, "one send")
	require.Contains(t, signatures[0], "Credential=ASIACONTAINER/", "signed with the container's credentials")
}
