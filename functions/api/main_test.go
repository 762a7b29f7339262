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

// Invariant: one role's sessions are one caller. A producer fleet (ECS tasks, EC2 instances) calls
// with one role under a session name per task or instance (its userArn
// arn:aws:sts::<account>:assumed-role/<role>/<session>): a create retried from another task, with
// the key the first one used (client.WithIdempotencyKey), replays the first answer. The session
// name was part of the scope, so the retry stored a second event.
func TestKeysAreScopedToTheRoleNotItsSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	server := newServer(config.Config{}, store, nil, nil)
	adapter := httpadapter.New(openapitest.Handler(t, server))
	invoke := func(identity events.APIGatewayRequestIdentity) (int64, events.APIGatewayProxyResponse) {
		t.Helper()
		resp, err := adapter.ProxyWithContext(ctx, events.APIGatewayProxyRequest{
			HTTPMethod: http.MethodPost, Path: "/events", Resource: "/events",
			MultiValueHeaders: map[string][]string{api.KeyHeader: {"order-42"}},
			RequestContext: events.APIGatewayProxyRequestContext{AccountID: "111122223333", Stage: "v1",
				HTTPMethod: http.MethodPost, ResourcePath: "/events", Identity: identity},
		})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode, resp.Body)
		var m struct{ ID int64 }
		require.NoError(t, json.Unmarshal([]byte(resp.Body), &m), resp.Body)
		return m.ID, resp
	}
	session := func(role, roleID, name string) events.APIGatewayRequestIdentity {
		return events.APIGatewayRequestIdentity{AccountID: "111122223333", Caller: roleID + ":" + name, User: roleID + ":" + name,
			UserArn: "arn:aws:sts::111122223333:assumed-role/" + role + "/" + name}
	}
	first, _ := invoke(session("producer", "AROAPRODUCER", "task-0a1b"))
	again, resp := invoke(session("producer", "AROAPRODUCER", "task-9f8e"))
	require.Equal(t, first, again, "the producer role's retry from another task")
	require.Equal(t, []string{"true"}, resp.MultiValueHeaders[api.ReplayedHeader])
	// Without a userArn, the caller's id is the role's too.
	again, _ = invoke(events.APIGatewayRequestIdentity{AccountID: "111122223333", Caller: "AROAPRODUCER:task-7777"})
	other, _ := invoke(events.APIGatewayRequestIdentity{AccountID: "111122223333", Caller: "AROAPRODUCER:task-8888"})
	require.Equal(t, again, other, "one role id, two sessions")
	// Another role is another caller.
	otherRole, _ := invoke(session("auditor", "AROAAUDITOR", "task-0a1b"))
	require.NotEqual(t, first, otherRole)
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
}
