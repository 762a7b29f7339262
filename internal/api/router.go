package api

import (
	"maps"
	"net/http"
	"slices"
	"strings"
)

// router routes requests to handlers with an http.ServeMux, and answers in JSON, through its two
// error functions, every request no handler takes: ServeMux would answer those in plain text, or
// with a redirect.
//
// Routes are registered one a line as "METHOD /path/{wildcard}" patterns (handle). The mux holds
// the path patterns, each with a resource that holds the methods registered on it: a request's
// path is matched first, by ServeMux's rules (a literal segment wins over a wildcard, {$} is a
// trailing slash), and its method then. So a path that exists is a 405 for another method, with the
// resource's methods as Allow, even where the method is registered on a path with a wildcard that
// would match: GET /events/async is a 405, where a ServeMux holding "GET /events/{id}" and
// "POST /events/async" would call the GET handler with id "async". And HEAD is not GET.
//
// The path matched is URL.Path, decoded, as the API has always matched it: the mux gets it with
// every byte but letters, digits, '-', '_', '~' and '/' percent-encoded, so that its segments are
// those of URL.Path: "/events%2Fasync" is /events/async, and the id of "/events/.." is "..", not
// a dot segment to clean away. A path with an empty segment before its end ("//events",
// "/events//1"), or not starting with "/", matches no route, where the mux would clean it and
// redirect; so does one the mux would redirect from /tree to /tree/.
type router struct {
	mux              *http.ServeMux
	paths            map[string]*resource // by path pattern
	notFound         func(w http.ResponseWriter, r *http.Request)
	methodNotAllowed func(w http.ResponseWriter, r *http.Request, allow string)
}

// resource is a path pattern's handlers, by method.
type resource struct {
	rt      *router
	methods map[string]http.HandlerFunc
	allow   string // the methods, sorted and comma-separated, as the Allow header of a 405
}

func newRouter(notFound func(http.ResponseWriter, *http.Request), methodNotAllowed func(http.ResponseWriter, *http.Request, string)) *router {
	return &router{mux: http.NewServeMux(), paths: map[string]*resource{}, notFound: notFound, methodNotAllowed: methodNotAllowed}
}

// handle registers h for pattern: a method, one space and a ServeMux path pattern, without a host
// ("GET /events/{id}"); h reads the wildcards with r.PathValue. It panics on a malformed pattern,
// on a method registered twice on a path, and (ServeMux does) on a path pattern that conflicts with
// another, such as the same path with another wildcard name.
func (rt *router) handle(pattern string, h http.HandlerFunc) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok || method == "" || !strings.HasPrefix(path, "/") || h == nil {
		panic("api: route " + pattern + `: want "METHOD /path" and a handler`)
	}
	res := rt.paths[path]
	if res == nil {
		res = &resource{rt: rt, methods: map[string]http.HandlerFunc{}}
		rt.mux.Handle(path, res)
		rt.paths[path] = res
	}
	if res.methods[method] != nil {
		panic("api: route " + pattern + " registered twice")
	}
	res.methods[method] = h
	res.allow = strings.Join(slices.Sorted(maps.Keys(res.methods)), ", ")
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := rt.match(r)
	if m == nil {
		rt.notFound(w, r)
		return
	}
	// The mux finds the resource again, and sets m's path values for its handler.
	rt.mux.ServeHTTP(w, m)
}

// match returns the request as the mux is to see it, a shallow copy of r that differs only in
// URL.RawPath, or nil if no resource matches its path.
func (rt *router) match(r *http.Request) *http.Request {
	path := r.URL.Path
	if r.RequestURI == "*" || !strings.HasPrefix(path, "/") || strings.Contains(path, "//") {
		return nil
	}
	u := *r.URL
	u.RawPath = escapePath(path)
	m := r.WithContext(r.Context())
	m.URL = &u
	// Anything but a resource is the mux's own answer: a 404, or a redirect.
	if h, _ := rt.mux.Handler(m); !isResource(h) {
		return nil
	}
	return m
}

func isResource(h http.Handler) bool {
	_, ok := h.(*resource)
	return ok
}

func (res *resource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := res.methods[r.Method]; h != nil {
		h(w, r)
		return
	}
	res.rt.methodNotAllowed(w, r, res.allow)
}

// escapePath percent-encodes every byte of a decoded path but letters, digits, '-', '_', '~' and
// '/': an encoding of it the mux neither cleans (it has no dot segments) nor splits but at its
// slashes.
func escapePath(path string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		c := path[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' || c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
