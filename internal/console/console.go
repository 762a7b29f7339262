// Package console serves the operators' web console under /ui/: its pages, embedded in
// the binary (static/), and its API under /ui/api/, which is a proxy to the events API limited to an
// allow-list of read routes and the two retries (proxy.go), plus the queues' depths and redrive
// (queues.go) and the rates of processing by path, from the metrics (rates.go, cloudwatch.go).
//
// The console runs on an operator's machine, on a loopback address: in `make run`'s process, where
// it calls the API's handler in-process, or from `make ui` (cmd/ui) against a deployed stack, where
// it signs each call with the operator's AWS credentials (SigV4, service execute-api). What keeps a
// web page the operator visits elsewhere from using it:
//   - a Host check (a DNS-rebinding defence): a request whose Host is not one of the console's own
//     names is refused, so a foreign name resolved to 127.0.0.1 reaches nothing;
//   - the refusal of any request under /ui/api/ that Sec-Fetch-Site or Origin says comes from
//     another site or origin (foreign), so that a page elsewhere cannot make the console call the
//     API or AWS with the operator's credentials, even blind;
//   - a CSRF token for every POST (the only method that changes anything), given by
//     GET /ui/api/session, which other origins cannot read (no CORS headers), and the refusal of a
//     POST that Sec-Fetch-Site or Origin says comes from another site;
//   - a Content-Security-Policy that lets the pages load and call nothing but the console itself.
package console

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Options configures the console.
type Options struct {
	// API is the events API's handler, called in-process (`make run`): mode "local". Nil: the
	// console calls APIURL, signing each request with Credentials (mode "aws").
	API http.Handler
	// APIURL is the deployed API's base URL with its stage, such as
	// https://abc.execute-api.eu-west-1.amazonaws.com/v1/, when API is nil; https, or http to a
	// loopback host (tests). With API set it is only shown (GET /ui/api/session).
	APIURL string
	// Credentials and Region sign the requests to APIURL (SigV4, service execute-api). Region
	// defaults to the one APIURL's host names (<id>.execute-api.<region>.amazonaws.com).
	Credentials aws.CredentialsProvider
	Region      string
	// HTTPClient calls APIURL; default: one with a 30 s timeout. It never follows a redirect
	// whatever its own CheckRedirect says: the console calls the allow-listed paths and no others.
	HTTPClient *http.Client

	// Addr is the address the console is served on (host:port, the listener's), the first of the
	// Host values it answers; localhost and 127.0.0.1 with Addr's port are the others, unless Hosts
	// is set, which then lists every Host value accepted.
	Addr  string
	Hosts []string

	// SQS and Queues give GET /ui/api/queues and the redrive: the source queues (names or URLs),
	// each with the DLQ its RedrivePolicy names. No SQS: no queues.
	SQS    *sqs.Client
	Queues []string
	// AWSTimeout bounds the console's own calls to AWS: reading the queues' depths, resolving a
	// queue and listing its DLQ for a dry run, and reading the rates; zero: DefaultAWSTimeout.
	AWSTimeout time.Duration

	// Rates gives GET /ui/api/rates, the events processed per second by path over the last minutes
	// (rates.go): the process's own metrics locally (CounterRates), CloudWatch's against a deployed
	// stack (CloudWatchRates). Nil: the answer says there is no source.
	Rates RatesSource

	// Logger gets the details of failures the answers do not show; default slog.Default().
	Logger *slog.Logger
}

// Security headers on every answer. The policy lets the pages load scripts, styles, images, fonts
// and data from the console only (and images from data: URLs), run no inline script, post forms only
// to the console, and be framed by nothing.
const (
	contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

// console is the handler New returns.
type console struct {
	opt      Options
	log      *slog.Logger
	hosts    map[string]bool
	token    string // the CSRF token, one per process
	mode     string // "local" or "aws"
	upstream *http.Client
	base     *url.URL // APIURL, for the remote mode
	queues   *queues
}

// New returns the console's handler, which serves /ui and everything under /ui/ (and answers 404 to
// anything else it is given).
func New(opt Options) (http.Handler, error) {
	c := &console{opt: opt, log: opt.Logger, hosts: map[string]bool{}}
	if c.log == nil {
		c.log = slog.Default()
	}
	hosts := opt.Hosts
	if len(hosts) == 0 {
		if opt.Addr == "" {
			return nil, errors.New("console: Options.Addr (the listen address) or Options.Hosts is required for the Host check")
		}
		_, port, err := net.SplitHostPort(opt.Addr)
		if err != nil {
			return nil, fmt.Errorf("console: Options.Addr %q: %w", opt.Addr, err)
		}
		hosts = []string{opt.Addr, net.JoinHostPort("localhost", port), net.JoinHostPort("127.0.0.1", port)}
	}
	for _, h := range hosts {
		c.hosts[strings.ToLower(h)] = true
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("console: CSRF token: %w", err)
	}
	c.token = base64.RawURLEncoding.EncodeToString(b)
	if err := c.setUpstream(); err != nil {
		return nil, err
	}
	c.queues = &queues{client: opt.SQS, log: c.log}
	if opt.SQS != nil {
		if err := c.queues.configure(opt.Queues); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	path := r.URL.EscapedPath()
	api := strings.HasPrefix(path, "/ui/api/")
	if api {
		h.Set("Cache-Control", "no-store")
	}
	if !c.hosts[strings.ToLower(r.Host)] {
		c.log.Warn("console: request refused: unexpected Host (DNS rebinding?)", "host", r.Host, "path", path)
		writeError(w, http.StatusForbidden, "this console does not answer to the host "+quote(r.Host)+": open it by the address it printed")
		return
	}
	if api {
		if refusal := c.foreign(r); refusal != "" {
			writeError(w, http.StatusForbidden, refusal)
			return
		}
	}
	switch {
	case path == "/ui":
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	case path == "/ui/":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, "GET, HEAD")
			return
		}
		serveStatic(w, r, files, "index.html")
	case strings.HasPrefix(path, "/ui/static/"):
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, "GET, HEAD")
			return
		}
		serveStatic(w, r, files, strings.TrimPrefix(path, "/ui/static/"))
	case path == "/ui/api/session":
		if r.Method != http.MethodGet {
			methodNotAllowed(w, "GET")
			return
		}
		apiURL := c.opt.APIURL
		writeJSON(w, http.StatusOK, map[string]string{"csrfToken": c.token, "mode": c.mode, "apiURL": apiURL})
	case path == "/ui/api/rates":
		c.serveRates(w, r)
	case path == "/ui/api/queues" || strings.HasPrefix(path, "/ui/api/queues/"):
		c.serveQueues(w, r, strings.TrimPrefix(path, "/ui/api/queues"))
	case api:
		c.proxy(w, r, strings.TrimPrefix(path, "/ui/api/"))
	default:
		writeError(w, http.StatusNotFound, "no such page: the console is at /ui/")
	}
}

// foreign returns why a request under /ui/api/ is refused as another site's or origin's doing, or ""
// if it is not: Sec-Fetch-Site other than same-origin (the console's own pages) or none (a URL
// typed by the operator), or an Origin other than the console's own. A request with neither header
// is a program's (curl), and passes. Without this, a page elsewhere that the operator visits could
// not read the answers (no CORS headers), but it could still make the console call the API, the
// queues and CloudWatch with the operator's AWS credentials, as often as it likes, and time them.
func (c *console) foreign(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return "refused: the request comes from another site (Sec-Fetch-Site: " + quote(site) + "); the console's API answers its own pages"
	}
	if origin := r.Header.Get("Origin"); origin != "" && !strings.EqualFold(origin, "http://"+r.Host) {
		return "refused: the request comes from another origin (" + quote(origin) + "); the console's API answers its own pages"
	}
	return ""
}

// checkPost refuses a POST that is not the console's own: without the session's CSRF token in
// X-CSRF-Token, or that the browser says comes from another site (Sec-Fetch-Site) or origin
// (Origin). It answers the refusal and returns false.
func (c *console) checkPost(w http.ResponseWriter, r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		writeError(w, http.StatusForbidden, "refused: the request comes from another site (Sec-Fetch-Site: "+quote(site)+")")
		return false
	}
	if origin := r.Header.Get("Origin"); origin != "" && !strings.EqualFold(origin, "http://"+r.Host) {
		writeError(w, http.StatusForbidden, "refused: the request comes from another origin ("+quote(origin)+")")
		return false
	}
	if !validToken(r.Header.Get("X-CSRF-Token"), c.token) {
		writeError(w, http.StatusForbidden, "refused: a POST needs the X-CSRF-Token header GET /ui/api/session gives")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"the console could not encode its answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "method not allowed: this path takes "+allow)
}
