package openapitest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// reporter collects a test's violations and fails the test with them when it ends (in a cleanup:
// a server's handler may still run after the test's function has returned, when t may no longer
// be told).
type reporter struct {
	mu   sync.Mutex
	errs []error
}

func newReporter(t testing.TB) *reporter {
	rep := &reporter{}
	t.Cleanup(func() {
		rep.mu.Lock()
		defer rep.mu.Unlock()
		for i, err := range rep.errs {
			if i == 20 {
				t.Errorf("openapitest: and %d more", len(rep.errs)-i)
				break
			}
			msg := err.Error()
			if len(msg) > 3000 { // kin-openapi prints the schema and the value of every mismatch
				msg = msg[:3000] + "..."
			}
			t.Errorf("openapitest: %s", msg)
		}
	})
	return rep
}

func (rep *reporter) add(err error) {
	rep.mu.Lock()
	rep.errs = append(rep.errs, err)
	rep.mu.Unlock()
}

// Handler returns h with every exchange it serves checked against the API's document; the test
// fails, when it ends, with every departure. Wrap the API's handler in it wherever a test serves
// the API (NewServer does).
func Handler(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	v := API(t)
	rep := newReporter(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := &teeBody{rc: r.Body, done: r.ContentLength == 0}
		r2 := *r
		r2.Body = body
		rw := &responseRecorder{ResponseWriter: w}
		h.ServeHTTP(rw, &r2)
		if rw.status == 0 {
			rw.WriteHeader(http.StatusOK)
		}
		x := Exchange{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header,
			Body: body.buf.Bytes(), BodyKnown: body.done, Status: rw.status, ResponseHeader: rw.header,
			ResponseBody: rw.body.Bytes()}
		if err := v.Check(x); err != nil {
			rep.add(err)
		}
	})
}

// NewServer serves h, checked by Handler, on loopback for the rest of the test.
func NewServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	checked := Handler(t, h) // its check runs after the server is closed (cleanups run last first)
	srv := httptest.NewServer(checked)
	t.Cleanup(srv.Close)
	return srv
}

// teeBody keeps what the handler reads of a request's body.
type teeBody struct {
	rc   io.ReadCloser
	buf  bytes.Buffer
	done bool // read to its end
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.buf.Write(p[:n])
	if err == io.EOF {
		b.done = true
	}
	return n, err
}

func (b *teeBody) Close() error { return b.rc.Close() }

// responseRecorder keeps the status, headers and body a handler answers, passing them on.
type responseRecorder struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (w *responseRecorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *responseRecorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the server's writer (the API sets read deadlines).
func (w *responseRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Transport returns a RoundTripper that checks every exchange it carries against the API's
// document, on the client's side: for a test that reaches an API it did not build (the local
// runner, another process). base nil is http.DefaultTransport. It reads each answer's body whole
// before handing it on; an error reading it is the round trip's error.
func Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	t.Helper()
	return TransportUnder(t, base, "")
}

// TransportUnder is Transport for an API served under a base path (API Gateway's stage, "/v1"):
// the paths checked are the requests' without prefix.
func TransportUnder(t testing.TB, base http.RoundTripper, prefix string) http.RoundTripper {
	t.Helper()
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, prefix: prefix, v: API(t), rep: newReporter(t)}
}

// Client is an HTTP client whose exchanges are checked (Transport), with a 30 s timeout.
func Client(t testing.TB) *http.Client {
	t.Helper()
	return &http.Client{Timeout: 30 * time.Second, Transport: Transport(t, nil)}
}

type transport struct {
	base   http.RoundTripper
	prefix string
	v      *Validator
	rep    *reporter
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		rewindable := req.GetBody != nil
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = nil
		if rewindable { // else net/http must not resend it after a cut either, as it would not have
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
	}
	resp, err := tr.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(got))
	x := Exchange{Method: req.Method, Path: strings.TrimPrefix(req.URL.Path, tr.prefix), Query: req.URL.RawQuery, Header: req.Header,
		Body: body, BodyKnown: true, Status: resp.StatusCode, ResponseHeader: resp.Header, ResponseBody: got}
	if err := tr.v.Check(x); err != nil {
		tr.rep.add(err)
	}
	return resp, nil
}
