package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Invariant: through the Lambda adapter, as API Gateway calls it, two IAM identities that send the
// same Idempotency-Key get separate events and separate answers, and each one's repeat replays its
// own answer, never the other's.
func TestKeysAreScopedToTheCallersIAMIdentity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	server := newServer(config.Config{}, store, nil, nil)
	adapter := httpadapter.New(openapitest.Handler(t, server))
	invoke := func(identity events.APIGatewayRequestIdentity, path string) (int64, events.APIGatewayProxyResponse) {
		t.Helper()
		resp, err := adapter.ProxyWithContext(ctx, events.APIGatewayProxyRequest{
			HTTPMethod: http.MethodPost, Path: path, Resource: path,
			Headers:           map[string]string{api.KeyHeader: "shared-key"},
			MultiValueHeaders: map[string][]string{api.KeyHeader: {"shared-key"}},
			RequestContext: events.APIGatewayProxyRequestContext{AccountID: "111122223333", Stage: "v1",
				HTTPMethod: http.MethodPost, ResourcePath: path, Identity: identity},
		})
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, resp.StatusCode, resp.Body)
		var m struct{ ID int64 }
		require.NoError(t, json.Unmarshal([]byte(resp.Body), &m), resp.Body)
		return m.ID, resp
	}
	alice := events.APIGatewayRequestIdentity{AccountID: "111122223333", Caller: "AIDAALICE",
		UserArn: "arn:aws:iam::111122223333:user/alice"}
	bob := events.APIGatewayRequestIdentity{AccountID: "111122223333", Caller: "AROABOB:session",
		UserArn: "arn:aws:sts::111122223333:assumed-role/bob/session"}

	aliceID, first := invoke(alice, "/events")
	bobID, bobFirst := invoke(bob, "/events")
	require.NotEqual(t, aliceID, bobID, "one key, two callers: two events")
	require.NotEqual(t, first.Body, bobFirst.Body)
	for range 2 {
		id, again := invoke(alice, "/events")
		require.Equal(t, aliceID, id)
		require.Equal(t, first.Body, again.Body, "alice's own answer")
		require.Equal(t, []string{"true"}, again.MultiValueHeaders[api.ReplayedHeader], "a replay")
		id, again = invoke(bob, "/events")
		require.Equal(t, bobID, id)
		require.Equal(t, bobFirst.Body, again.Body, "bob's own answer")
	}
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)

	// Without an identity (an API without authorisation), one scope, separate from both.
	anonID, _ := invoke(events.APIGatewayRequestIdentity{}, "/events")
	require.NotContains(t, []int64{aliceID, bobID}, anonID)
}
