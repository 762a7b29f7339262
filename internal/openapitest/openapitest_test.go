package openapitest_test

import (
	"net/http"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/stretchr/testify/require"
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
