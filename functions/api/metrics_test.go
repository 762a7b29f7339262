package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Each invocation of the Lambda's handler writes one EMF line, after its work: what the request
// did, under FunctionName = the function's name.
func TestOneMetricLinePerInvocation(t *testing.T) {
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "stack-ApiFunction")
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	var out bytes.Buffer
	server := newServer(config.Config{}, store, nil, wire.NewLogger(io.Discard, 0))
	h := handler(server, openapitest.Handler(t, server), &out, server.Logger)
	invoke := func(requestID, path, key string) []map[string]any {
		t.Helper()
		out.Reset()
		req := events.APIGatewayProxyRequest{HTTPMethod: http.MethodPost, Path: path, Resource: path,
			RequestContext: events.APIGatewayProxyRequestContext{Stage: "v1", HTTPMethod: http.MethodPost, ResourcePath: path}}
		if key != "" {
			req.Headers = map[string]string{api.KeyHeader: key}
			req.MultiValueHeaders = map[string][]string{api.KeyHeader: {key}}
		}
		ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: requestID})
		resp, err := h(ctx, req)
		require.NoError(t, err)
		require.Less(t, resp.StatusCode, 500, resp.Body)
		return emfLines(t, out.String())
	}

	for i := range 3 {
		lines := invoke("req-"+string(rune('a'+i)), "/events", "")
		require.Len(t, lines, 1, "one line per invocation")
		line := lines[0]
		require.Equal(t, "stack-ApiFunction", line["FunctionName"])
		require.EqualValues(t, 1, line["EventsCreatedSync"])
		require.EqualValues(t, 0, line["EventsCreatedAsync"])
		require.EqualValues(t, 0, line["DeadlockRetries"])
		// The create's insert, and the first one's block of ids too.
		require.NotEmpty(t, line["TransactionDuration"], "the create's transaction")
	}
	line := invoke("req-k1", "/events/async", "k")[0]
	require.EqualValues(t, 1, line["EventsCreatedAsync"])
	require.EqualValues(t, 0, line["IdempotentReplays"])
	line = invoke("req-k2", "/events/async", "k")[0]
	require.EqualValues(t, 0, line["EventsCreatedAsync"])
	require.EqualValues(t, 1, line["IdempotentReplays"], "the same key again: a replay")

}

// emfLines returns the EMF lines of out, parsed, checking that each is an EMF document of the
// ExactlyOnce namespace with the FunctionName dimension.
func emfLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, raw := range strings.Split(strings.TrimSpace(out), "\n") {
		if raw == "" {
			continue
		}
		var root map[string]any
		require.NoError(t, json.Unmarshal([]byte(raw), &root), raw)
		d := root["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
		require.Equal(t, "ExactlyOnce", d["Namespace"])
		require.Equal(t, []any{[]any{"FunctionName"}}, d["Dimensions"])
		lines = append(lines, root)
	}
	return lines
}

// A queue send is counted by its outcome: sent, or failed (its event stays pending for the sweeper).
func TestQueueSendsAreCounted(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	client := localsqs.Client(t)
	good := localsqs.Queues(t, client, 30, 5)
	for _, tc := range []struct {
		url          string
		sends, fails float64
	}{{good.URL, 1, 0}, {good.URL + "-missing", 0, 1}} {
		var out bytes.Buffer
		server := &api.Server{Stores: store.API(), AsyncGroup: api.AsyncGroup{Inline: true}, Logger: wire.NewLogger(io.Discard, 0),
			Queue: &queue.SQSSender{Client: client, QueueURL: tc.url}}
		h := handler(server, openapitest.Handler(t, server), &out, server.Logger)
		resp, err := h(context.Background(), events.APIGatewayProxyRequest{HTTPMethod: http.MethodPost, Path: "/events/async",
			Resource: "/events/async", RequestContext: events.APIGatewayProxyRequestContext{Stage: "v1", HTTPMethod: http.MethodPost}})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode, "stored, sent or not: %s", resp.Body)
		line := emfLines(t, out.String())[0]
		require.EqualValues(t, 1, line["EventsCreatedAsync"])
		require.Equal(t, tc.sends, line["QueueSends"], tc.url)
		require.Equal(t, tc.fails, line["QueueSendFailures"], tc.url)
	}
}
