package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
)

// call is one request the stand-in API received.
type call struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   string
	Host                   string
}

// fakeAPI stands in for the events API: it records every request and answers status with a JSON
// body naming the path it got.
type fakeAPI struct {
	mu     sync.Mutex
	calls  []call
	status int
	body   string // if set, the answer's body
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.calls = append(f.calls, call{Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: string(b), Host: r.Host})
	status, body := f.status, f.body
	f.mu.Unlock()
	if status == 0 {
		status = http.StatusOK
	}
	if body == "" {
		out, _ := json.Marshal(map[string]string{"path": r.URL.EscapedPath()})
		body = string(out)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (f *fakeAPI) received() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// serve serves a console built from opt on a loopback port (opt.Addr is set to it) and returns its
// base URL, http://127.0.0.1:<port>.
func serve(t *testing.T, opt Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opt.Addr = ln.Addr().String()
	h, err := New(opt)
	require.NoError(t, err)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// client follows no redirect, so that tests see them.
var client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends method to url (which may hold escapes the client sends as they are) with headers, and
// returns the answer's status, headers and body.
func do(t *testing.T, method, url string, body string, headers map[string]string) (int, http.Header, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// session returns the console's CSRF token, as the pages get it.
func session(t *testing.T, base string) map[string]string {
	t.Helper()
	status, _, body := do(t, "GET", base+"/ui/api/session", "", nil)
	require.Equal(t, http.StatusOK, status, body)
	var s map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	return s
}

// requireSecurityHeaders checks the headers every answer carries.
func requireSecurityHeaders(t *testing.T, h http.Header, what string) {
	t.Helper()
	require.Equal(t, contentSecurityPolicy, h.Get("Content-Security-Policy"), what)
	require.Contains(t, h.Get("Content-Security-Policy"), "script-src 'self'", what)
	require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), what)
	require.Equal(t, "no-referrer", h.Get("Referrer-Policy"), what)
}

// The pages: /ui redirects to /ui/, which is index.html; /ui/static/ serves the embedded files with
// their content types and lists no directory nor reaches outside it. Every answer has the security
// headers, and the API's answers are not cached.
func TestPages(t *testing.T) {
	t.Parallel()
	base := serve(t, Options{API: &fakeAPI{}})

	status, h, _ := do(t, "GET", base+"/ui", "", nil)
	require.Equal(t, http.StatusMovedPermanently, status)
	require.Equal(t, "/ui/", h.Get("Location"))
	requireSecurityHeaders(t, h, "/ui")

	status, h, body := do(t, "GET", base+"/ui/", "", nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"))
	require.Contains(t, body, "<main id=\"main\"")
	requireSecurityHeaders(t, h, "/ui/")

	status, h, body2 := do(t, "GET", base+"/ui/static/index.html", "", nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, body, body2)
	require.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"))

	for _, p := range []string{"/ui/static/", "/ui/static/missing.js", "/ui/static/../console.go", "/ui/static/%2e%2e/console.go",
		"/ui/static/..%2fconsole.go", "/ui/other", "/elsewhere"} {
		status, h, body := do(t, "GET", base+p, "", nil)
		require.Equal(t, http.StatusNotFound, status, p)
		require.Equal(t, "application/json", h.Get("Content-Type"), p)
		require.NotContains(t, body, "package console", p)
		requireSecurityHeaders(t, h, p)
	}

	status, h, _ = do(t, "POST", base+"/ui/", "", nil)
	require.Equal(t, http.StatusMethodNotAllowed, status)

	status, h, _ = do(t, "GET", base+"/ui/api/agents", "", nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "no-store", h.Get("Cache-Control"))
	requireSecurityHeaders(t, h, "/ui/api/agents")
}

// GET /ui/api/session gives a CSRF token (the same for the process's life), the mode and the API's URL.
func TestSession(t *testing.T) {
	t.Parallel()
	base := serve(t, Options{API: &fakeAPI{}, APIURL: "http://127.0.0.1:8080"})
	s := session(t, base)
	require.Len(t, s["csrfToken"], 43, "32 random bytes, base64url")
	require.Equal(t, "local", s["mode"])
	require.Equal(t, "http://127.0.0.1:8080", s["apiURL"])
	require.Equal(t, s, session(t, base))

	other := serve(t, Options{API: &fakeAPI{}})
	require.NotEqual(t, s["csrfToken"], session(t, other)["csrfToken"], "one token per console")
}

// The DNS-rebinding defence: a Host that is not one of the console's names is refused, whatever
// the path; its own names (the listen address, localhost and 127.0.0.1 with its port) pass.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{}
	base := serve(t, Options{API: api})
	port := base[strings.LastIndex(base, ":")+1:]
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1", "localhost:1", "127.0.0.1.nip.io:" + port} {
		for _, p := range []string{"/ui/", "/ui/api/session", "/ui/api/agents"} {
			status, h, body := do(t, "GET", base+p, "", map[string]string{"Host": host})
			require.Equal(t, http.StatusForbidden, status, "%s %s", host, p)
			require.Contains(t, body, "does not answer to the host", host)
			require.NotContains(t, body, "csrfToken")
			requireSecurityHeaders(t, h, host)
		}
	}
	require.Empty(t, api.received(), "nothing reached the API")
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST:" + port} {
		status, _, _ := do(t, "GET", base+"/ui/api/agents", "", map[string]string{"Host": host})
		require.Equal(t, http.StatusOK, status, host)
	}

	// A configured list replaces the default.
	base = serve(t, Options{API: api, Hosts: []string{"console.internal:9000"}})
	status, _, _ := do(t, "GET", base+"/ui/", "", nil)
	require.Equal(t, http.StatusForbidden, status)
	status, _, _ = do(t, "GET", base+"/ui/", "", map[string]string{"Host": "console.internal:9000"})
	require.Equal(t, http.StatusOK, status)
}

// Every POST needs the session's token in X-CSRF-Token, and is refused when the browser says it
// comes from another site or origin; the API is not called then. GET needs no token.
func TestCSRF(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{}
	base := serve(t, Options{API: api})
	token := session(t, base)["csrfToken"]
	own := "http://" + strings.TrimPrefix(base, "http://")
	for _, c := range []struct {
		name    string
		headers map[string]string
	}{
		{"no token", nil},
		{"empty token", map[string]string{"X-CSRF-Token": ""}},
		{"wrong token", map[string]string{"X-CSRF-Token": token[:42] + "x"}},
		{"token prefix", map[string]string{"X-CSRF-Token": token[:20]}},
		{"cross-site", map[string]string{"X-CSRF-Token": token, "Sec-Fetch-Site": "cross-site"}},
		{"same-site", map[string]string{"X-CSRF-Token": token, "Sec-Fetch-Site": "same-site"}},
		{"none", map[string]string{"X-CSRF-Token": token, "Sec-Fetch-Site": "none"}},
		{"foreign origin", map[string]string{"X-CSRF-Token": token, "Origin": "http://evil.example"}},
		{"null origin", map[string]string{"X-CSRF-Token": token, "Origin": "null"}},
		{"other port", map[string]string{"X-CSRF-Token": token, "Origin": "http://127.0.0.1:1"}},
	} {
		for _, p := range []string{"/ui/api/events/5/retry", "/ui/api/references/ref-1/retry"} {
			status, _, body := do(t, "POST", base+p, "", c.headers)
			require.Equal(t, http.StatusForbidden, status, "%s %s: %s", c.name, p, body)
			require.Contains(t, body, "refused", c.name)
		}
	}
	require.Empty(t, api.received(), "no refused POST reached the API")

	status, _, body := do(t, "POST", base+"/ui/api/events/5/retry", "", map[string]string{"X-CSRF-Token": token,
		"Sec-Fetch-Site": "same-origin", "Origin": own})
	require.Equal(t, http.StatusOK, status, body)
	status, _, body = do(t, "POST", base+"/ui/api/references/ref-1/retry", "", map[string]string{"X-CSRF-Token": token})
	require.Equal(t, http.StatusOK, status, body)
	got := api.received()
	require.Len(t, got, 2)
	require.Equal(t, "POST /events/5/retry", got[0].Method+" "+got[0].Path)
	require.Equal(t, "POST /references/ref-1/retry", got[1].Method+" "+got[1].Path)
	require.Empty(t, got[0].Header.Get("X-CSRF-Token"), "the console's own headers stay with it")
}

// A directory is not listed, and a file in one is served with its extension's content type (the
// embedded folder has no directory yet: a file system of the test's).
func TestStaticDirectories(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{"js/app.js": {Data: []byte("console.log(1)")}, "css/app.css": {Data: []byte("p{}")}}
	for _, c := range []struct{ name, contentType string }{{"js/app.js", "text/javascript; charset=utf-8"}, {"css/app.css", "text/css; charset=utf-8"}} {
		rec := httptest.NewRecorder()
		serveStatic(rec, httptest.NewRequest("GET", "/ui/static/"+c.name, nil), fsys, c.name)
		require.Equal(t, http.StatusOK, rec.Code, c.name)
		require.Equal(t, c.contentType, rec.Header().Get("Content-Type"))
	}
	for _, name := range []string{"js", "js/", "css", "."} {
		rec := httptest.NewRecorder()
		serveStatic(rec, httptest.NewRequest("GET", "/ui/static/"+name, nil), fsys, name)
		require.Equal(t, http.StatusNotFound, rec.Code, name)
		require.NotContains(t, rec.Body.String(), "app.js", name)
	}
}

// countingRates is a RatesSource that counts its calls (against AWS, each is a GetMetricData signed
// with the operator's credentials).
type countingRates struct{ calls atomic.Int64 }

func (c *countingRates) Rates(context.Context) (Rates, error) {
	c.calls.Add(1)
	return Rates{Source: "test"}, nil
}

// A page on another site cannot make the operator's browser use the console's API, to read or to
// call: a request under /ui/api/ that the browser marks as another site's (Sec-Fetch-Site
// cross-site or same-site, which a page on another port of localhost is) or another origin's is
// refused before anything is called, the API (against AWS, signed with the operator's
// credentials), the rates' source (CloudWatch) or the queues (SQS); the session's token is not
// given to it either. The pages themselves still open from a link elsewhere (a navigation), and
// the console's own requests (same-origin), typed URLs (none) and programs (no such headers) are
// served.
func TestCrossSiteRequestsReachNothing(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{}
	rates := &countingRates{}
	base := serve(t, Options{API: api, Rates: rates})
	for _, c := range []struct {
		name    string
		headers map[string]string
	}{
		{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}},
		{"same-site", map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}},
		{"foreign origin", map[string]string{"Origin": "http://evil.example"}},
		{"null origin", map[string]string{"Origin": "null"}},
	} {
		for _, p := range []string{"/ui/api/session", "/ui/api/agents", "/ui/api/events?state=failed", "/ui/api/events/5",
			"/ui/api/references/ref-1/events", "/ui/api/rates", "/ui/api/queues"} {
			status, h, body := do(t, "GET", base+p, "", c.headers)
			require.Equal(t, http.StatusForbidden, status, "%s %s: %s", c.name, p, body)
			require.Contains(t, body, "refused", c.name)
			require.NotContains(t, body, "csrfToken", c.name)
			requireSecurityHeaders(t, h, c.name+" "+p)
		}
	}
	require.Empty(t, api.received(), "no cross-site request reached the API")
	require.Zero(t, rates.calls.Load(), "no cross-site request read the rates")

	// The pages open from a link on another site.
	status, _, _ := do(t, "GET", base+"/ui/", "", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"})
	require.Equal(t, http.StatusOK, status)
	// The console's own reads, a typed URL, and a program.
	own := "http://" + strings.TrimPrefix(base, "http://")
	for _, headers := range []map[string]string{{"Sec-Fetch-Site": "same-origin", "Origin": own}, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, nil} {
		for _, p := range []string{"/ui/api/session", "/ui/api/agents", "/ui/api/rates"} {
			status, _, body := do(t, "GET", base+p, "", headers)
			require.Equal(t, http.StatusOK, status, "%v %s: %s", headers, p, body)
		}
	}
	require.Len(t, api.received(), 4)
	require.EqualValues(t, 4, rates.calls.Load())
}
