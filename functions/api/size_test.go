package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// lambdaResponseLimit is what Lambda returns of a synchronous invocation: 6 MB of its response
// document, the proxy response as the runtime marshals it (the body a JSON string inside it).
const lambdaResponseLimit = 6 << 20

// A listing's page fits in Lambda's response as the runtime sends it, whatever the payloads: the
// page ended once its answer passed 4 MiB, but the answer travels as a JSON string inside the proxy
// response, where each '\' and '"' of it takes two bytes. Payloads of backslashes (or quotes, or
// JSON held in strings, which is mostly quotes) made a 4 MiB page an 8 MiB response, which Lambda
// refuses: API Gateway's 502 for the listing of their state, and the console's, for every reader.
func TestAListingFitsInALambdaResponse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	server := newServer(config.Config{}, store, nil, nil)
	invoke := handler(server, server, io.Discard, nil)
	call := func(method, path string, query map[string][]string, body string) events.APIGatewayProxyResponse {
		t.Helper()
		resp, err := invoke(ctx, events.APIGatewayProxyRequest{HTTPMethod: method, Path: path, Body: body,
			MultiValueQueryStringParameters: query,
			RequestContext:                  events.APIGatewayProxyRequestContext{Stage: "v1", HTTPMethod: method}})
		require.NoError(t, err)
		return resp
	}
	for _, payload := range []string{
		`"` + strings.Repeat(`\\`, 130_000) + `"`,                      // backslashes: two bytes each in the answer, four in the response
		`"` + strings.Repeat(`\"`, 130_000) + `"`,                      // quotes
		`{"body": "` + strings.Repeat(`{\"k\":\"v\"},`, 18_000) + `"}`, // JSON held in a string
	} {
		for range 20 {
			resp := call(http.MethodPost, "/events/async", nil, `{"url": "https://example.com/hook", "payload": `+payload+`}`)
			require.Equal(t, http.StatusAccepted, resp.StatusCode, resp.Body)
		}
	}
	before := []string(nil)
	pages := 0
	for {
		q := map[string][]string{"state": {"pending"}, "kind": {"task"}, "limit": {"100"}}
		if before != nil {
			q["before"] = before
		}
		resp := call(http.MethodGet, "/events", q, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, resp.Body)
		doc, err := json.Marshal(resp) // as the runtime sends it
		require.NoError(t, err)
		require.LessOrEqual(t, len(doc), lambdaResponseLimit, "page %d: a response of %d bytes, which Lambda refuses", pages, len(doc))
		var page struct {
			Events []json.RawMessage `json:"events"`
			Next   *string           `json:"next"`
		}
		require.NoError(t, json.Unmarshal([]byte(resp.Body), &page))
		require.NotEmpty(t, page.Events)
		pages++
		if page.Next == nil {
			break
		}
		before = []string{*page.Next}
	}
	t.Logf("60 tasks in %d pages", pages)
}
