package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// A malformed parameter (a query parameter, a body, a header) is the caller's mistake whatever the
// id the path names: every route with an id in its path checks the request's own form first (the
// path's names, then the query, the body and the headers) and only then looks the id up, so an
// unknown id, or an event that is not a task, with a bad parameter is a 400 naming the parameter,
// never a 404. GET /events/{id}/attempts looked the event up first, and answered ?after=x on an
// unknown id with 404 "event ... not found".
func TestAMalformedParameterIsRefusedBeforeTheIdIsLookedUp(t *testing.T) {
	t.Parallel()
	stores := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	s := &api.Server{Stores: stores.API()}
	h := openapitest.Handler(t, s)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/events", nil))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var plain struct{ ID int64 }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &plain))

	const unknown = "999999999"
	cases := []struct {
		method, path, body string
		header             http.Header
		names              string // what the 400's message names
	}{
		{"GET", "/events/" + unknown + "/attempts?after=x", "", nil, "after"},
		{"GET", "/events/" + unknown + "/attempts?after=99999999999", "", nil, "after"},
		{"GET", "/events/" + unknown + "/attempts?limit=0", "", nil, "limit"},
		{"GET", "/events/" + unknown + "/attempts?color=red", "", nil, "color"},
		{"GET", "/events/" + unknown + "/attempts?after=1&after=2", "", nil, "after"},
		{"GET", fmt.Sprintf("/events/%d/attempts?after=x", plain.ID), "", nil, "after"}, // a plain event: not a task, 404 for a good query
		{"GET", "/events/" + unknown + "?after=x", "", nil, "after"},
		{"POST", "/events/" + unknown + "/retry?after=x", "", nil, "after"},
		{"POST", "/events/" + unknown + "/retry", `{"force":true}`, nil, "force"},
		{"POST", "/events/" + unknown + "/retry", "", http.Header{"Idempotency-Key": {"k"}}, "Idempotency-Key"},
		{"GET", "/workers/w_unknown?after=x", "", nil, "after"},
		{"POST", "/references/unknown-ref/retry?after=x", "", nil, "after"},
		{"POST", "/references/unknown-ref/retry", `{"force":true}`, nil, "force"},
		{"GET", "/references/unknown-ref/events?after=x", "", nil, "after"},
		{"GET", "/counters/unknown-user?after=a/b", "", nil, "after"},
		{"GET", "/counters/unknown-user/unknown-type?after=x", "", nil, "after"},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
			for k, vs := range c.header {
				req.Header[k] = vs
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			var e struct{ Error string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
			require.Contains(t, e.Error, c.names)
		})
	}

	// With good parameters the same ids are what they were: unknown (404), or not a task (404).
	for _, path := range []string{"/events/" + unknown + "/attempts?after=1", fmt.Sprintf("/events/%d/attempts?after=1", plain.ID)} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusNotFound, rec.Code, rec.Body.String())
	}
}
