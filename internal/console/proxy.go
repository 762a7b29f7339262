package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/exactlyonce/exactlyonce"
)

// route is one API call the console may make: a method, a path of literal segments and parameters
// ("{id}", digits only; any other "{name}", one non-empty segment), and the query parameters passed
// through.
type route struct {
	method, path string
	query        []string
}

// routes is the allow-list: the console's calls under /ui/api/ are these API routes and no others.
// Every one but the retries reads.
var routes = []route{
	{"GET", "overview", nil},
	{"GET", "history", nil},
	{"GET", "events", []string{"state", "kind", "before", "limit"}},
	{"GET", "events/{id}", nil},
	{"GET", "events/{id}/attempts", []string{"after", "limit"}},
	{"GET", "references/{referenceId}/events", []string{"after", "limit"}},
	{"GET", "agents", nil},
	{"GET", "workers", []string{"active"}},
	{"GET", "workers/{workerId}", nil},
	{"GET", "counters/{userId}", []string{"after", "limit"}},
	{"GET", "counters/{userId}/{entityType}", nil},
	{"POST", "events/{id}/retry", nil},
	{"POST", "references/{referenceId}/retry", nil},
}

// Limits: a request body the console forwards (the retries take none), and an answer it passes on.
const (
	maxRequestBody  = 64 << 10
	maxResponseBody = 16 << 20
)

// match finds the routes whose path matches the escaped path's segments, and returns the upstream
// path built from them, every segment re-escaped. A segment that is empty, a dot segment, longer
// than a name may be (exactlyonce.MaxNameLength characters), or that decodes to something holding a
// slash, a backslash or a control character matches nothing, so no request reaches a path off the
// list. These are the path rules of the names the API accepts (exactlyonce.CheckPathName), so that
// every name it accepts reads back through here; the API judges the rest of a name (a 400).
func match(escaped string) (upstream string, matched []route) {
	segs := strings.Split(escaped, "/")
	values := make([]string, len(segs))
	for i, s := range segs {
		v, ok := segment(s)
		if !ok {
			return "", nil
		}
		values[i] = v
	}
	for _, rt := range routes {
		pat := strings.Split(rt.path, "/")
		if len(pat) != len(values) {
			continue
		}
		out := make([]string, len(pat))
		ok := true
		for i, p := range pat {
			switch {
			case p == "{id}":
				ok = digits(values[i])
			case strings.HasPrefix(p, "{"):
				// The value is escaped again for the upstream, so it stays one segment there.
			default:
				ok = values[i] == p
			}
			if !ok {
				break
			}
			out[i] = url.PathEscape(values[i])
		}
		if ok {
			upstream = "/" + strings.Join(out, "/")
			matched = append(matched, rt)
		}
	}
	return upstream, matched
}

// shapeHint says, for a path that has the shape of a listed route (its literal segments, as many
// segments) but a parameter no route takes, what the parameter must be: an odd id (-1, 1e3, 20
// digits) or name (a tab, "..", 300 characters) was answered "no such console API route" and
// nothing else.
func shapeHint(escaped string) string {
	segs := strings.Split(escaped, "/")
	for _, rt := range routes {
		pat := strings.Split(rt.path, "/")
		if len(pat) != len(segs) || !literalsMatch(pat, segs) {
			continue
		}
		for i, p := range pat {
			if p == "{id}" && !digits(segs[i]) {
				return " (an event id is 1 to 19 digits)"
			}
		}
		for i, p := range pat {
			if !strings.HasPrefix(p, "{") || p == "{id}" {
				continue
			}
			if _, ok := segment(segs[i]); !ok {
				return fmt.Sprintf(" (a name is at most %d characters, not . or .., with no control character, slash or backslash)", exactlyonce.MaxNameLength)
			}
		}
	}
	return ""
}

// segment returns an escaped path segment's value, and whether a route may take it: not empty, not a
// dot segment, no longer than a name may be (exactlyonce.MaxNameLength characters), and holding no
// slash, backslash or control character once decoded (exactlyonce.CheckPathName's rules).
func segment(escaped string) (string, bool) {
	v, err := url.PathUnescape(escaped)
	if err != nil || v == "" || v == "." || v == ".." || strings.ContainsAny(v, "/\\") || exactlyonce.HasControl(v) ||
		utf8.RuneCountInString(v) > exactlyonce.MaxNameLength {
		return "", false
	}
	return v, true
}

// literalsMatch says whether segs has pat's literal segments where pat has them.
func literalsMatch(pat, segs []string) bool {
	for i, p := range pat {
		if !strings.HasPrefix(p, "{") && segs[i] != p {
			return false
		}
	}
	return true
}

func digits(s string) bool {
	if len(s) == 0 || len(s) > 19 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// proxy answers a call under /ui/api/ (rest is the escaped path after it): the API's answer to the
// allow-listed route it matches, or 404 (no route), 405 (another method), 400 (a query parameter the
// route does not take), 403 (a POST that is not the console's own; checkPost), 502 (the API did not
// answer, or not in JSON).
func (c *console) proxy(w http.ResponseWriter, r *http.Request, rest string) {
	upstream, matched := match(rest)
	var rt *route
	var allow []string
	for i := range matched {
		allow = append(allow, matched[i].method)
		if matched[i].method == r.Method {
			rt = &matched[i]
		}
	}
	if len(matched) == 0 {
		writeError(w, http.StatusNotFound, "no such console API route: /ui/api/"+rest+shapeHint(rest))
		return
	}
	if rt == nil {
		slices.Sort(allow)
		methodNotAllowed(w, strings.Join(slices.Compact(allow), ", "))
		return
	}
	query := url.Values{}
	for k, vs := range r.URL.Query() {
		if !slices.Contains(rt.query, k) {
			msg := fmt.Sprintf("unknown query parameter %s: %s /%s takes none", quote(k), rt.method, rt.path)
			if len(rt.query) > 0 {
				msg = fmt.Sprintf("unknown query parameter %s: %s /%s takes %s", quote(k), rt.method, rt.path, strings.Join(rt.query, ", "))
			}
			writeError(w, http.StatusBadRequest, msg)
			return
		}
		query[k] = vs
	}
	var body []byte
	if r.Method == http.MethodPost {
		if !c.checkPost(w, r) {
			return
		}
		var err error
		if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody)); err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes, or could not be read", maxRequestBody))
			return
		}
	}
	status, answer, retryAfter, err := c.call(r.Context(), r.Method, upstream, query.Encode(), body)
	if errors.Is(err, errCredentials) {
		c.log.Error("console: the API call was not made: no AWS credentials to sign it with", "method", r.Method, "path", upstream, "err", err)
		writeError(w, http.StatusBadGateway, "the console could not sign the call: your AWS credentials could not be read (expired?); the console's log says why")
		return
	}
	if err != nil {
		c.log.Error("console: the API call failed", "method", r.Method, "path", upstream, "err", err)
		if r.Method == http.MethodPost {
			// The request may have reached the API and been applied, its answer lost: said, so that
			// the page does not invite a second retry as if the first had been refused.
			writeError(w, http.StatusBadGateway, "the API did not answer the retry"+unknownOutcome+"; the console's log says why")
			return
		}
		writeError(w, http.StatusBadGateway, "the API did not answer; the console's log says why")
		return
	}
	if retryAfter != "" && (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests || status == http.StatusConflict) {
		// The API's (or the gateway's) advice to try again (a database or the history's archive
		// down, a key in flight), passed on to the pages and to any caller of /ui/api.
		w.Header().Set("Retry-After", retryAfter)
	}
	writeRaw(w, status, gatewayRefusal(status, answer, r.Method == http.MethodPost))
}

// unknownOutcome ends the message of a retry whose answer was lost: the API may have applied it (a
// retry is not keyed, so sending it again may retry the task again once it has failed again).
const unknownOutcome = ": it may have been applied; read the task (or its reference) before retrying again"

// gatewayRefusal returns the answer to pass on for an API answer of status. API Gateway answers
// the calls it refuses itself (IAM authorisation, throttling, an integration that timed out) in its
// own shape, {"message": "..."} ({"Message": "..."} for an explicit deny), where the API answers
// {"error": "..."}, the field the pages show: such a refusal is passed on as {"error"} saying it
// (for a 403, with what the identity needs; for a 502 or 504 of a retry, post, that it may have been
// applied: the integration failed or timed out, maybe after the API's commit). Anything else is
// passed on as it is.
func gatewayRefusal(status int, answer []byte, post bool) []byte {
	if status < 400 {
		return answer
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(answer, &fields) != nil {
		return answer
	}
	if _, ok := fields["error"]; ok {
		return answer
	}
	var msg string
	for _, k := range []string{"message", "Message"} {
		if raw, ok := fields[k]; ok && json.Unmarshal(raw, &msg) == nil && msg != "" {
			break
		}
	}
	if msg == "" {
		return answer
	}
	if r := []rune(msg); len(r) > 500 {
		msg = string(r[:500]) + "..."
	}
	text := fmt.Sprintf("API Gateway refused the call (%d): %s", status, msg)
	if status == http.StatusForbidden {
		text += " (the console signs with your AWS identity, which needs execute-api:Invoke on the API, and credentials that have not expired)"
	}
	if post && (status == http.StatusBadGateway || status == http.StatusGatewayTimeout) {
		text += unknownOutcome
	}
	b, err := json.Marshal(map[string]string{"error": text})
	if err != nil {
		return answer
	}
	return b
}

// errCredentials is call's error when the call was not made because the credentials to sign it
// with could not be read.
var errCredentials = errors.New("AWS credentials")

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// call makes the API call method path?query (path escaped, the API's own, without the stage) and
// returns the answer's status, body and Retry-After (if it is a number of seconds): an error if
// there is none, or if its body is not JSON.
func (c *console) call(ctx context.Context, method, path, query string, body []byte) (int, []byte, string, error) {
	u := "http://api.in-process" + path
	if c.base != nil {
		u = c.base.Scheme + "://" + c.base.Host + strings.TrimSuffix(c.base.EscapedPath(), "/") + path
	}
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Accept", "application/json")
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.base != nil {
		if err := c.sign(ctx, req, body); err != nil {
			return 0, nil, "", err
		}
	}
	resp, err := c.upstream.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	// The API never redirects; a redirect is not followed (a Location is not on the allow-list), nor
	// passed on to the pages.
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return 0, nil, "", fmt.Errorf("the answer is a redirect (status %d) to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody+1))
	if err != nil {
		return 0, nil, "", fmt.Errorf("read the answer (status %d): %w", resp.StatusCode, err)
	}
	if len(answer) > maxResponseBody {
		return 0, nil, "", fmt.Errorf("the answer (status %d) is over %d bytes", resp.StatusCode, maxResponseBody)
	}
	// Only JSON is passed on: an answer of another kind (an HTML error page of a proxy, say) is the
	// upstream failing, not something for the pages to show.
	if !json.Valid(answer) {
		return 0, nil, "", fmt.Errorf("the answer (status %d, %s) is not JSON: %q", resp.StatusCode, resp.Header.Get("Content-Type"), truncate(answer))
	}
	retryAfter := resp.Header.Get("Retry-After")
	if n, err := strconv.Atoi(retryAfter); err != nil || n < 0 || n > 3600 {
		retryAfter = "" // only a delay in seconds, as the API sends it: nothing else is passed on
	}
	return resp.StatusCode, answer, retryAfter, nil
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// setUpstream sets how the console calls the API: the in-process handler, or APIURL over HTTP.
func (c *console) setUpstream() error {
	if c.opt.API != nil {
		c.mode = "local"
		c.upstream = &http.Client{Transport: handlerTransport{c.opt.API}}
		return nil
	}
	c.mode = "aws"
	if c.opt.APIURL == "" {
		return errors.New("console: Options.API (in-process) or Options.APIURL is required")
	}
	u, err := CheckAPIURL(c.opt.APIURL)
	if err != nil {
		return err
	}
	if c.opt.Credentials == nil {
		return errors.New("console: Options.Credentials are required to sign the calls to the API URL")
	}
	if c.opt.Region == "" {
		c.opt.Region = RegionOf(u.Hostname())
		if c.opt.Region == "" {
			return fmt.Errorf("console: the API URL's host %q names no region (<id>.execute-api.<region>.amazonaws.com): set the region", u.Hostname())
		}
	}
	c.base = u
	client := c.opt.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	// A copy that follows no redirect: a Location is not on the allow-list.
	cc := *client
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.upstream = &cc
	return nil
}

// RegionOf returns the region an API Gateway host names (<id>.execute-api.<region>.amazonaws.com,
// or .amazonaws.com.cn), or "".
func RegionOf(host string) string {
	parts := strings.Split(strings.ToLower(host), ".")
	if len(parts) >= 5 && parts[1] == "execute-api" && parts[3] == "amazonaws" {
		return parts[2]
	}
	return ""
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sign signs req with SigV4 for API Gateway (service execute-api), over body's SHA-256, which it
// also sends as X-Amz-Content-Sha256.
func (c *console) sign(ctx context.Context, req *http.Request, body []byte) error {
	creds, err := c.opt.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errCredentials, err)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	return v4.NewSigner().SignHTTP(ctx, creds, req, hash, "execute-api", c.opt.Region, time.Now())
}

// handlerTransport answers a request with an http.Handler, in-process: `make run`'s console calls
// the API's handler directly.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	// A server request has RequestURI set and the Host header in Host, as the API's handler expects.
	req.RequestURI = req.URL.RequestURI()
	req.RemoteAddr = "127.0.0.1:0"
	t.h.ServeHTTP(rec, req)
	return &http.Response{StatusCode: rec.status, Header: rec.header, Body: io.NopCloser(&rec.body),
		ContentLength: int64(rec.body.Len()), Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// recorder is the in-process answer: an http.ResponseWriter that keeps it.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}

// CheckAPIURL parses a deployed API's base URL: https://<host>/<stage>/ and nothing else (no user,
// query or fragment); http only to a loopback host (tests). cmd/ui checks it before it looks for
// credentials, so that a mistyped URL is said first.
func CheckAPIURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("console: API URL %q: want https://<host>/<stage>/ and nothing else", raw)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && loopback(u.Hostname()):
	default:
		return nil, fmt.Errorf("console: API URL %q: https is required (http only to a loopback host)", raw)
	}
	return u, nil
}
