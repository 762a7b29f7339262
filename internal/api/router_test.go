package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/openapitest"
)

// testRouter is a router whose handlers and error functions write what they were called for.
func testRouter(patterns ...string) *router {
	rt := newRouter(
		func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, "no route %s", r.URL.Path)
		},
		func(w http.ResponseWriter, r *http.Request, allow string) {
			w.Header().Set("Allow", allow)
			w.WriteHeader(http.StatusMethodNotAllowed)
			fmt.Fprintf(w, "use %s", allow)
		})
	for _, p := range patterns {
		rt.handle(p, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s", p)
			for _, name := range []string{"id", "rest"} {
				if v := r.PathValue(name); v != "" {
					fmt.Fprintf(w, " %s=%s", name, v)
				}
			}
		})
	}
	return rt
}

func serve(h http.Handler, method, path string) string {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}, Body: http.NoBody})
	s := fmt.Sprintf("%d %s", rec.Code, rec.Body)
	if a := rec.Header().Get("Allow"); a != "" {
		s += " [Allow: " + a + "]"
	}
	return s
}

// The path is matched before the method; Allow is the methods registered on the path, sorted; the
// wildcards are read with PathValue; HEAD is not GET.
func TestRouterMatchesThePathThenTheMethod(t *testing.T) {
	t.Parallel()
	rt := testRouter("GET /tasks", "POST /tasks", "DELETE /tasks", "GET /tasks/{id}", "POST /tasks/claim", "PUT /tasks/{id}/result")
	for _, c := range [][3]string{
		{"GET", "/tasks", "200 GET /tasks"},
		{"DELETE", "/tasks", "200 DELETE /tasks"},
		{"PATCH", "/tasks", "405 use DELETE, GET, POST [Allow: DELETE, GET, POST]"},
		{"HEAD", "/tasks", "405 use DELETE, GET, POST [Allow: DELETE, GET, POST]"},
		{"GET", "/tasks/7", "200 GET /tasks/{id} id=7"},
		{"HEAD", "/tasks/7", "405 use GET [Allow: GET]"},
		{"POST", "/tasks/claim", "200 POST /tasks/claim"},
		{"GET", "/tasks/claim", "405 use POST [Allow: POST]"}, // not GET /tasks/{id} with id "claim"
		{"PUT", "/tasks/7/result", "200 PUT /tasks/{id}/result id=7"},
		{"GET", "/tasks/7/result", "405 use PUT [Allow: PUT]"},
		{"GET", "/tasks/7/other", "404 no route /tasks/7/other"},
		{"GET", "/tasks/", "404 no route /tasks/"},
		{"GET", "/", "404 no route /"},
	} {
		require.Equal(t, c[2], serve(rt, c[0], c[1]), "%s %s", c[0], c[1])
	}
}

// The mux never answers a request itself: no cleaning, no redirect, no plain-text 404 or 405.
func TestRouterNeverRedirects(t *testing.T) {
	t.Parallel()
	rt := testRouter("GET /tree/", "GET /files/{rest...}", "GET /a/{id}")
	for _, c := range [][3]string{
		{"GET", "/tree/", "200 GET /tree/"},
		{"GET", "/tree/x/y", "200 GET /tree/"},
		{"GET", "/tree", "404 no route /tree"}, // ServeMux redirects it to /tree/
		{"CONNECT", "/tree", "404 no route /tree"},
		{"GET", "/files/x/../y", "200 GET /files/{rest...} rest=x/../y"}, // not cleaned to /files/y
		{"GET", "/files/./x", "200 GET /files/{rest...} rest=./x"},
		{"GET", "/a/..", "200 GET /a/{id} id=.."}, // not cleaned to /
		{"GET", "/a/.", "200 GET /a/{id} id=."},
		{"GET", "/a/%2F", "200 GET /a/{id} id=%2F"}, // URL.Path is decoded: this is the id "%2F"
		{"GET", "/a/b/../c", "404 no route /a/b/../c"},
		{"GET", "//a/1", "404 no route //a/1"},
		{"GET", "/a//1", "404 no route /a//1"},
		{"GET", "/files//x", "404 no route /files//x"},
		{"GET", "a/1", "404 no route a/1"},
		{"GET", "", "404 no route "},
		{"GET", "*", "404 no route *"},
	} {
		require.Equal(t, c[2], serve(rt, c[0], c[1]), "%s %s", c[0], c[1])
	}
}

// The handler gets the request it was sent, but for URL.RawPath, which is an encoding of the same
// URL.Path.
func TestRouterHandsOverTheRequest(t *testing.T) {
	t.Parallel()
	rt := newRouter(nil, nil)
	var got *http.Request
	rt.handle("POST /events/{id}", func(_ http.ResponseWriter, r *http.Request) { got = r })
	r := httptest.NewRequest("POST", "/events/%61.b?x=1", strings.NewReader("body"))
	r = r.WithContext(t.Context())
	rt.ServeHTTP(httptest.NewRecorder(), r)
	require.NotNil(t, got)
	require.Equal(t, "a.b", got.PathValue("id"))
	require.Equal(t, "/events/a.b", got.URL.Path)
	require.Equal(t, "x=1", got.URL.RawQuery)
	require.Equal(t, "/events/a%2Eb", got.URL.EscapedPath())
	require.Equal(t, "/events/%61.b?x=1", got.RequestURI)
	require.True(t, r.Body == got.Body, "the same body")
	require.Equal(t, t.Context(), got.Context())
	require.Equal(t, "/events/%61.b", r.URL.EscapedPath(), "the caller's request is left as it was")
	require.Empty(t, r.PathValue("id"))
}

func TestRouterRefusesBadRegistrations(t *testing.T) {
	t.Parallel()
	ok := func(http.ResponseWriter, *http.Request) {}
	for _, c := range []struct {
		pattern string
		before  []string
	}{
		{pattern: "/events"},                                      // no method
		{pattern: "GET"},                                          // no path
		{pattern: "GET events"},                                   // not a path
		{pattern: "GET  /events"},                                 // two spaces
		{pattern: "GET example.com/events"},                       // a host
		{pattern: " /events"},                                     // empty method
		{pattern: "GET /events/{id"},                              // ServeMux refuses it
		{pattern: "GET /events", before: []string{"GET /events"}}, // twice
		{pattern: "POST /events/{n}", before: []string{"GET /events/{id}"}}, // the same path, another name
	} {
		rt := newRouter(nil, nil)
		for _, p := range c.before {
			rt.handle(p, ok)
		}
		require.Panics(t, func() { rt.handle(c.pattern, ok) }, c.pattern)
	}
	require.Panics(t, func() { newRouter(nil, nil).handle("GET /x", nil) }, "no handler")
}

// escapePath is an encoding of the path that url.URL keeps as it is, the mux cannot clean, and
// that decodes to the path.
func FuzzEscapePath(f *testing.F) {
	for _, s := range []string{"/events/1", "/events/..", "/a b/%/?#/\x00/\xff/é/", "", ".", "//x/./y/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		e := escapePath(path)
		require.NotContains(t, e, ".")
		u := &url.URL{Path: path, RawPath: e}
		require.Equal(t, e, u.EscapedPath())
		d, err := url.PathUnescape(e)
		require.NoError(t, err)
		require.Equal(t, path, d)
		require.Equal(t, strings.Count(path, "/"), strings.Count(e, "/"))
	})
}

// The package comment's route table lists the routes registered, and every registered route is
// in it, but for the one alias of GET /events/{id}.
func TestTheDocTableListsTheRoutes(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("api.go")
	require.NoError(t, err)
	var doc []string
	for _, m := range regexp.MustCompile(`(?m)^//\t([A-Z]+) +(/\S*)`).FindAllStringSubmatch(string(src), -1) {
		doc = append(doc, m[1]+" "+m[2])
	}
	var registered []string
	for path, res := range (&Server{}).routes().paths {
		for method := range res.methods {
			if method+" "+path != "GET /events/{$}" { // an empty id, in the table's GET /events/{id}
				registered = append(registered, method+" "+path)
			}
		}
	}
	slices.Sort(doc)
	slices.Sort(registered)
	require.NotEmpty(t, doc)
	require.Equal(t, doc, registered)
}

// The API's OpenAPI document lists the routes registered, and every registered route is in it, but
// for the one alias of GET /events/{id}: a route it does not list, or one the API does not serve, is
// a drift (the traffic of every test is checked against it too: internal/openapitest).
func TestTheOpenAPIDocumentListsTheRoutes(t *testing.T) {
	t.Parallel()
	var documented []string
	for path, item := range openapitest.API(t).Doc().Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	var registered []string
	for path, res := range (&Server{}).routes().paths {
		for method := range res.methods {
			if method+" "+path != "GET /events/{$}" {
				registered = append(registered, method+" "+path)
			}
		}
	}
	slices.Sort(documented)
	slices.Sort(registered)
	require.NotEmpty(t, documented)
	require.Equal(t, registered, documented)
}
