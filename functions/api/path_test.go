package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// A path reads the same through the function as through make run's server, whether the event's
// path is percent-encoded (as API Gateway's REST API hands it over) or decoded: a referenceId with
// a `?`, a `#`, a `%`, a space or a letter outside ASCII is that referenceId. The adapter parsed
// the event's path as a URL, so a decoded `?` or `#` cut the path there (GET
// /references/a?b/events was a 404 "no route for GET /references/a"), and a decoded `%` failed the
// invocation ("invalid URL escape"), which API Gateway answers 502 and the Go client retries as a
// fault of the service, five times, for a caller's name.
func TestAPathReadsTheSameEncodedOrDecoded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	server := newServer(config.Config{}, store, nil, nil)
	invoke := handler(server, openapitest.Handler(t, server), io.Discard, nil)
	for _, ref := range []string{"a?b", "a#b", "50%", "50%zz", "a b", "é", "a?limit=1&b", "plain"} {
		encoded := "/references/" + url.PathEscape(ref) + "/events"
		decoded := "/references/" + ref + "/events"
		for _, path := range []string{encoded, decoded} {
			resp, err := invoke(ctx, events.APIGatewayProxyRequest{
				HTTPMethod: http.MethodGet, Path: path, Resource: "/references/{referenceId}/events",
				PathParameters: map[string]string{"referenceId": ref},
				RequestContext: events.APIGatewayProxyRequestContext{AccountID: "111122223333", Stage: "v1",
					HTTPMethod: http.MethodGet, ResourcePath: "/references/{referenceId}/events"},
			})
			require.NoError(t, err, "%q: the invocation failed (API Gateway answers 502)", path)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%q: %s", path, resp.Body)
			var page struct{ ReferenceID string }
			require.NoError(t, json.Unmarshal([]byte(resp.Body), &page))
			require.Equal(t, ref, page.ReferenceID, "%q", path)
		}
	}
	// An encoded path is left as it is: %32 is the digit 2, %2F a slash that separates segments
	// (as make run reads them).
	for path, want := range map[string]int{"/events/%32": http.StatusNotFound, "/references/a%2Fb/events": http.StatusNotFound, "/events/%3F": http.StatusBadRequest} {
		resp, err := invoke(ctx, events.APIGatewayProxyRequest{HTTPMethod: http.MethodGet, Path: path,
			RequestContext: events.APIGatewayProxyRequestContext{Stage: "v1", HTTPMethod: http.MethodGet}})
		require.NoError(t, err, path)
		require.Equal(t, want, resp.StatusCode, "%s: %s", path, resp.Body)
	}
}
