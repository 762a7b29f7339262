package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// With the API open to unsigned requests (-c publicApi=true), a task whose url is the API's own POST
// /events/async and whose payload is a task's body made a new task at each delivery, without end.
// The function refuses, at create, a task url whose host is the domain the request came in by (API
// Gateway's requestContext.domainName: the execute-api domain, or a custom domain), and the one the
// stack sets in WEBHOOK_API_HOSTS, in any case, with a trailing dot; a 400 naming the url, nothing
// written. Another host is a task like any other.
func TestATaskToTheAPIsOwnDomainIsRefusedAtCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	const domain, custom = "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com", "events.example.com"
	server := newServer(config.Config{Webhook: config.Webhook{APIHosts: []string{domain}}}, store, nil, nil)
	adapter := httpadapter.New(openapitest.Handler(t, server))
	create := func(via, url string) events.APIGatewayProxyResponse {
		t.Helper()
		body, err := json.Marshal(map[string]any{"url": url, "payload": map[string]string{"url": url}})
		require.NoError(t, err)
		resp, err := adapter.ProxyWithContext(ctx, events.APIGatewayProxyRequest{
			HTTPMethod: http.MethodPost, Path: "/events/async", Resource: "/events/async", Body: string(body),
			Headers: map[string]string{"Host": via}, MultiValueHeaders: map[string][]string{"Host": {via}},
			RequestContext: events.APIGatewayProxyRequestContext{AccountID: "111122223333", Stage: "prod", DomainName: via,
				HTTPMethod: http.MethodPost, ResourcePath: "/events/async"},
		})
		require.NoError(t, err)
		return resp
	}
	for _, c := range []struct{ via, url string }{
		{domain, "https://" + domain + "/prod/events/async"},
		{domain, "https://" + strings.ToUpper(domain) + "./prod/events/async"},
		{custom, "https://" + custom + "/events/async"},      // the request's own domain, a custom one
		{custom, "https://" + domain + "/prod/events/async"}, // WEBHOOK_API_HOSTS, whatever the request's
	} {
		resp := create(c.via, c.url)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s via %s: %s", c.url, c.via, resp.Body)
		require.Contains(t, resp.Body, "this system's own API", c.url)
		require.True(t, strings.HasPrefix(resp.Body, `{"error":"url: `), resp.Body)
	}
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a refused create writes nothing")
	resp := create(domain, "https://hooks.example.org/x")
	require.Equal(t, http.StatusAccepted, resp.StatusCode, resp.Body)
}
