package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// GET /counters/{userId} and /counters/{userId}/{entityType}: the counts as the consumer left
// them; an unknown count is 0 at version 0; a user id or type out of bounds is a 400 naming it.
func TestCounterRoutes(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	_, err := store.Counters.ApplyCounterMessages(context.Background(), []exactlyonce.CounterMessage{
		{EntityID: "m1", EntityType: "message", UserID: "ann", Action: "added"},
		{EntityID: "m2", EntityType: "message", UserID: "ann", Action: "added"},
		{EntityID: "m1", EntityType: "message", UserID: "ann", Action: "readed"},
		{EntityID: "d1", EntityType: "dialog", UserID: "ann", Action: "added"},
		{EntityID: "d1", EntityType: "dialog", UserID: "bob", Action: "added"},
	})
	require.NoError(t, err)
	h := &api.Server{Stores: store.API()}

	code, got := serve(t, h, "GET", "/counters/ann", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"userId": "ann", "counters": map[string]any{
		"message": map[string]any{"sum": 1.0, "version": 3.0},
		"dialog":  map[string]any{"sum": 1.0, "version": 1.0},
	}, "next": nil}, got)
	code, got = serve(t, h, "GET", "/counters/ann/message", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"userId": "ann", "entityType": "message", "sum": 1.0, "version": 3.0}, got)
	code, got = serve(t, h, "GET", "/counters/nobody/message", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"userId": "nobody", "entityType": "message", "sum": 0.0, "version": 0.0}, got)
	code, got = serve(t, h, "GET", "/counters/nobody", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"userId": "nobody", "counters": map[string]any{}, "next": nil}, got)

	code, got = serve(t, h, "GET", "/counters/"+strings.Repeat("x", 256), "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "userId must be 1 to 255 characters, got 256", got["error"])
	code, got = serve(t, h, "GET", "/counters/ann/"+strings.Repeat("é", 256), "")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "entityType must be 1 to 255 characters, got 256", got["error"])
	// What the counter consumer refuses to count, a read refuses too.
	for path, want := range map[string]string{
		"/counters/ann ":         "userId must not end with a space",
		"/counters/ann/message ": "entityType must not end with a space",
		"/counters/..":           `userId must not be "." or ".."`,
		"/counters/ann/.":        `entityType must not be "." or ".."`,
		`/counters/a\b/message`:  `userId must not contain '/' or '\'`,
		"/counters/ann/\xff":     "entityType must be valid UTF-8",
	} {
		code, got = serve(t, h, "GET", path, "")
		require.Equal(t, http.StatusBadRequest, code, path)
		require.True(t, strings.HasPrefix(got["error"].(string), want), "%s: %v", path, got)
	}
	code, _ = serve(t, h, "POST", "/counters/ann", "")
	require.Equal(t, http.StatusMethodNotAllowed, code)
}

// GET /counters/{userId} answers a page of the user's counts: a user may have any number of types,
// and the answer must fit in a Lambda's (6 MB; 5,000 types of 200 characters were 6.1 MB). The
// types after ?after=, in byte order, at most ?limit= (1,000 by default), and next, the after of
// the next page; walking the pages gives every count once. A bad, unknown or repeated parameter is
// a 400 naming it.
func TestCounterRoutePages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	const types = api.DefaultCounterLimit + 5
	var ms []exactlyonce.CounterMessage
	for i := range types {
		ms = append(ms, exactlyonce.CounterMessage{EntityID: "e", EntityType: fmt.Sprintf("t%04d", i), UserID: "many", Action: "added"})
	}
	for lo := 0; lo < len(ms); lo += 250 {
		_, err := store.Counters.ApplyCounterMessages(ctx, ms[lo:min(lo+250, len(ms))])
		require.NoError(t, err)
	}
	s := &api.Server{Stores: store.API()}
	type page struct {
		UserID   string                    `json:"userId"`
		Counters map[string]map[string]int `json:"counters"`
		Next     *string                   `json:"next"`
	}

	var p page
	getJSON(t, s, "/counters/many", http.StatusOK, &p)
	require.Len(t, p.Counters, api.DefaultCounterLimit)
	require.NotNil(t, p.Next)
	require.Equal(t, fmt.Sprintf("t%04d", api.DefaultCounterLimit-1), *p.Next)
	after := *p.Next
	p = page{}
	getJSON(t, s, "/counters/many?after="+after, http.StatusOK, &p)
	require.Len(t, p.Counters, 5)
	require.Nil(t, p.Next)

	seen := map[string]bool{}
	after = ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, types/300+2)
		path := "/counters/many?limit=300"
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		p = page{}
		getJSON(t, s, path, http.StatusOK, &p)
		for typ, v := range p.Counters {
			require.False(t, seen[typ], typ)
			require.Greater(t, typ, after)
			require.Equal(t, map[string]int{"sum": 1, "version": 1}, v)
			seen[typ] = true
		}
		if p.Next == nil {
			break
		}
		after = *p.Next
	}
	require.Len(t, seen, types)

	// A user with fewer counts than a page: all of them, next null.
	p = page{}
	getJSON(t, s, "/counters/nobody", http.StatusOK, &p)
	require.Empty(t, p.Counters)
	require.Nil(t, p.Next)

	var e struct {
		Error string `json:"error"`
	}
	for path, want := range map[string]string{
		"/counters/many?limit=0":           "limit 0 is out of range",
		"/counters/many?limit=1001":        "limit 1001 is out of range",
		"/counters/many?limit=x":           "limit must be an integer",
		"/counters/many?after=":            "after must be 1 to 255 characters",
		"/counters/many?after=a%20":        "after must not end with a space",
		"/counters/many?after=a&after=b":   "query parameter after given 2 times",
		"/counters/many?type=message":      `unknown query parameter "type"`,
		"/counters/many?limit=5&limit=500": "query parameter limit given 2 times",
		"/counters/many?after=%zz":         "malformed query string",
	} {
		getJSON(t, s, path, http.StatusBadRequest, &e)
		require.Contains(t, e.Error, want, path)
	}
}
