package openapitest_test

import (
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/openapitest"
)

func json(h ...string) http.Header {
	out := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(h); i += 2 {
		out.Set(h[i], h[i+1])
	}
	return out
}

// The validator refuses what the document does not describe, and passes what it does.
func TestCheck(t *testing.T) {
	v := openapitest.API(t)
	for _, c := range []struct {
		name string
		x    openapitest.Exchange
		ok   bool
	}{
		{"a documented answer", openapitest.Exchange{Method: "GET", Path: "/events", Status: 200,
			ResponseHeader: json(), ResponseBody: []byte(`{"count":3}`)}, true},
		{"an undocumented field", openapitest.Exchange{Method: "GET", Path: "/events", Status: 200,
			ResponseHeader: json(), ResponseBody: []byte(`{"count":3,"extra":1}`)}, false},
		{"an undocumented status", openapitest.Exchange{Method: "GET", Path: "/overview", Status: 404,
			ResponseHeader: json(), ResponseBody: []byte(`{"error":"x"}`)}, false},
		{"an undocumented route", openapitest.Exchange{Method: "GET", Path: "/secret", Status: 200,
			ResponseHeader: json(), ResponseBody: []byte(`{}`)}, false},
		{"an unknown route's 404", openapitest.Exchange{Method: "GET", Path: "/secret", Status: 404,
			ResponseHeader: json(), ResponseBody: []byte(`{"error":"no route for GET /secret"}`)}, true},
		{"an undocumented method", openapitest.Exchange{Method: "DELETE", Path: "/events/1", Status: 200,
			ResponseHeader: json(), ResponseBody: []byte(`{}`)}, false},
		{"a 405 whose Allow is the document's", openapitest.Exchange{Method: "DELETE", Path: "/events", Status: 405,
			ResponseHeader: json("Allow", "GET, POST"), ResponseBody: []byte(`{"error":"method not allowed; use GET, POST"}`)}, true},
		{"a 405 whose Allow is not", openapitest.Exchange{Method: "DELETE", Path: "/events", Status: 405,
			ResponseHeader: json("Allow", "GET, POST, PUT"), ResponseBody: []byte(`{"error":"x"}`)}, false},
		{"a refused request answered 2xx", openapitest.Exchange{Method: "GET", Path: "/events/abc", Status: 200,
			ResponseHeader: json(), ResponseBody: []byte(`{"id":1,"value":null,"state":"pending","processCount":0}`)}, false},
		{"a refused request answered 400", openapitest.Exchange{Method: "GET", Path: "/events/abc", Status: 400,
			ResponseHeader: json(), ResponseBody: []byte(`{"error":"event id must be a positive integer"}`)}, true},
		{"a task's create", openapitest.Exchange{Method: "POST", Path: "/events/async", Status: 202,
			Body: []byte(`{"url":"https://example.com/hook","referenceId":"r1","payload":{"a":[1]}}`), BodyKnown: true,
			ResponseHeader: json(), ResponseBody: []byte(`{"id":12}`)}, true},
		{"a create with an undocumented field, accepted", openapitest.Exchange{Method: "POST", Path: "/events/async", Status: 202,
			Body: []byte(`{"url":"https://example.com/hook","colour":"red"}`), BodyKnown: true,
			ResponseHeader: json(), ResponseBody: []byte(`{"id":12}`)}, false},
		{"a 503 without Retry-After", openapitest.Exchange{Method: "POST", Path: "/events", Status: 503,
			ResponseHeader: json(), ResponseBody: []byte(`{"error":"database unavailable"}`)}, false},
		{"a 503 with Retry-After", openapitest.Exchange{Method: "POST", Path: "/events", Status: 503,
			ResponseHeader: json("Retry-After", "1"), ResponseBody: []byte(`{"error":"database unavailable"}`)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := v.Check(c.x)
			if c.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				t.Log(err)
			}
		})
	}
}

// The document's own rules, beyond OpenAPI's (which New checks): every operation is named and
// summarised and documents the 500 and the 503 the API may always answer, and every object schema
// with properties is closed, so that a field the API adds and the document does not name fails the
// tests (to add one, add it to the schema's properties).
func TestTheDocumentIsStrict(t *testing.T) {
	doc := openapitest.API(t).Doc()
	ids := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			what := method + " " + path
			require.NotEmpty(t, op.OperationID, what)
			require.False(t, ids[op.OperationID], "%s: operationId %s used twice", what, op.OperationID)
			ids[op.OperationID] = true
			require.NotEmpty(t, op.Summary, what)
			if path == "/openapi.yaml" {
				continue // the document itself: an open object, and served from memory
			}
			for _, status := range []int{500, 503} {
				require.NotNil(t, op.Responses.Status(status), "%s documents %d", what, status)
			}
			for status, resp := range op.Responses.Map() {
				for ct, media := range resp.Value.Content {
					closed(t, what+" "+status+" "+ct, media.Schema, map[*openapi3.Schema]bool{})
				}
			}
		}
	}
	for name, s := range doc.Components.Schemas {
		closed(t, "components.schemas."+name, s, map[*openapi3.Schema]bool{})
	}
}

func closed(t *testing.T, where string, ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) {
	t.Helper()
	if ref == nil || ref.Value == nil || seen[ref.Value] {
		return
	}
	s := ref.Value
	seen[s] = true
	if len(s.Properties) > 0 {
		has := s.AdditionalProperties.Has
		require.True(t, has != nil && !*has, "%s: an object with properties must say additionalProperties: false", where)
	}
	for name, p := range s.Properties {
		closed(t, where+"."+name, p, seen)
	}
	for _, list := range []openapi3.SchemaRefs{s.OneOf, s.AnyOf, s.AllOf} {
		for _, sub := range list {
			closed(t, where, sub, seen)
		}
	}
	closed(t, where+"[]", s.Items, seen)
	closed(t, where+"{}", s.AdditionalProperties.Schema, seen)
}
