// Package client is a Go client of the exactlyonce API (openapi.yaml at the module's root): a typed
// call for every route, typed errors, and retries that are safe.
//
//	c, err := client.New("http://127.0.0.1:8080", client.Options{}) // make run: no signing
//	e, err := c.CreateEvent(ctx)                                    // POST /events
//
// Against the deployed stack, NewAWS signs every request with SigV4 (service execute-api), with the
// credentials and region of the AWS SDK's default chain (environment, shared config, SSO, the
// instance's or the function's role).
//
// Every create carries an Idempotency-Key, generated once per call (or the caller's, given with
// WithIdempotencyKey) and sent again on each of its retries, so that a create retried after its
// answer was lost (a connection cut after the server committed, a 503 whose write had committed)
// returns the original event and stores nothing new; a create that failed after its retries
// names its key (Error.IdempotencyKey, ConnectionError.IdempotencyKey), to be called again as the
// same create. A read or a create is retried, with capped, jittered exponential backoff, on a
// connection error, a 429, a 503, or API Gateway's 502 or 504, after at least the answer's
// Retry-After; and a create on the 409 of its key still in flight, which the API answers with
// Retry-After to say exactly that. A task's or a reference's retry (RetryTask, RetryReference) has
// no key: it is retried only when it certainly did nothing (a 429, a connection refused), and a
// 503 or a connection cut is returned for the caller to look before calling again. Any other 4xx
// is returned at once. The context's deadline bounds the whole call, retries included.
//
// A user id, entity type or referenceId is a segment of a request's path: one that a path cannot
// carry (empty, "." or "..", with '/', '\' or a control character, ending with a space, over 255
// characters; exactlyonce.CheckPathName) is refused before anything is sent, as the API refuses
// it, with an *Error of status 400 naming it.
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Options configures a Client. The zero value takes the defaults.
type Options struct {
	// HTTPClient sends the requests; default one with a 30 s timeout per attempt. The client uses a
	// copy of it that follows no redirect (its CheckRedirect is replaced): a redirect is an *Error.
	HTTPClient *http.Client
	// Credentials and Region sign every request with SigV4 for API Gateway (service execute-api).
	// Nil Credentials: requests are not signed (the local runner). NewAWS fills both from the AWS
	// SDK's default chain.
	Credentials aws.CredentialsProvider
	Region      string
	// Retry shapes the retries; the zero value takes the defaults.
	Retry Retry
}

// Retry shapes a call's retries: attempt n (from 1) waits a random time from 0 to
// min(MaxDelay, BaseDelay * 2^(n-1)) ("full jitter"), or the answer's Retry-After if that is longer.
type Retry struct {
	// MaxAttempts bounds the attempts of one call, the first included. Default 5; 1 never retries.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the backoff. Defaults 100 ms and 5 s.
	BaseDelay, MaxDelay time.Duration
}

// Default retry settings.
const (
	DefaultMaxAttempts = 5
	DefaultBaseDelay   = 100 * time.Millisecond
	DefaultMaxDelay    = 5 * time.Second
)

func (r Retry) withDefaults() Retry {
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.BaseDelay <= 0 {
		r.BaseDelay = DefaultBaseDelay
	}
	if r.MaxDelay <= 0 {
		r.MaxDelay = DefaultMaxDelay
	}
	return r
}

// Backoff is the random wait before attempt n+1 after n failed attempts (n >= 1), without
// Retry-After: from 0 to min(MaxDelay, BaseDelay * 2^(n-1)).
func (r Retry) Backoff(n int) time.Duration {
	r = r.withDefaults()
	ceiling := r.MaxDelay
	if n < 1 {
		n = 1
	}
	if n-1 < 32 {
		if d := r.BaseDelay << (n - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return rand.N(ceiling + 1)
}

// Client calls the API. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	http  *http.Client
	opt   Options
	retry Retry
}

// New returns a client of the API at baseURL: http://127.0.0.1:8080 for `make run`, or the stack's
// ApiUrl output (https://<id>.execute-api.<region>.amazonaws.com/v1/) with Options.Credentials.
func New(baseURL string, opt Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: the base URL must be an http(s) URL, got %q", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if opt.Credentials != nil && opt.Region == "" {
		return nil, errors.New("client: Options.Region is required to sign requests")
	}
	hc := http.Client{Timeout: 30 * time.Second}
	if opt.HTTPClient != nil {
		hc = *opt.HTTPClient
	}
	// A redirect is the answer, an *Error naming where it points, never followed: net/http turns a
	// POST redirected by a 301, 302 or 303 into a GET, so a create behind an http:// url that a
	// proxy sends to https:// came back as GET /events's count, decoded as the event created (id 0,
	// no error, nothing created); and a redirect elsewhere would take the call, and its SigV4
	// session token, to another host.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &Client{base: u, http: &hc, opt: opt, retry: opt.Retry.withDefaults()}
	return c, nil
}

// NewAWS returns a client of a deployed stack's API that signs every request with SigV4, with the
// credentials and region of the AWS SDK's default chain (opt's own, when set, win).
func NewAWS(ctx context.Context, baseURL string, opt Options) (*Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: load the AWS configuration: %w", err)
	}
	if opt.Credentials == nil {
		opt.Credentials = cfg.Credentials
	}
	if opt.Region == "" {
		opt.Region = cfg.Region
	}
	if opt.Credentials == nil {
		return nil, errors.New("client: no AWS credentials found")
	}
	return New(baseURL, opt)
}

// request is one logical call: what each of its attempts sends.
type request struct {
	method string
	path   string // escaped: built with seg() from the caller's values
	query  url.Values
	body   []byte // nil: no body
	key    string // the Idempotency-Key, on creates
}

// response is the answer of a call's last attempt.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do runs a call: its attempts, and the waits between them, until one gets an answer that is not
// to be retried, the attempts run out, or ctx is done. A 2xx answer is returned; any other is an
// *Error.
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	var lastErr error
	for attempt := 1; ; attempt++ {
		resp, err := c.attempt(ctx, r)
		var wait time.Duration
		switch {
		case err != nil && ctx.Err() != nil && r.key != "":
			// A create cut short may have been stored: its key, to call it again as the same one.
			return nil, errors.Join(ctx.Err(), &ConnectionError{Err: err, IdempotencyKey: r.key})
		case err != nil && ctx.Err() != nil:
			return nil, errors.Join(ctx.Err(), err)
		case errors.As(err, new(*localError)):
			return nil, err // nothing was sent: nothing to retry
		case err != nil:
			lastErr = &ConnectionError{Err: err, IdempotencyKey: r.key}
			if !r.repeatable() && !notSent(err) {
				return nil, lastErr // it may have been done: only the caller can tell
			}
		case resp.status >= 200 && resp.status < 300:
			return resp, nil
		default:
			apiErr := newError(resp)
			apiErr.IdempotencyKey = r.key
			if !retryable(r, resp.status) {
				return nil, apiErr
			}
			lastErr, wait = apiErr, apiErr.RetryAfter
		}
		if attempt >= c.retry.MaxAttempts {
			return nil, lastErr
		}
		wait = max(wait, c.retry.Backoff(attempt))
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return nil, lastErr // no attempt could end in time: say why now
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(ctx.Err(), lastErr)
		case <-t.C:
		}
	}
}

// retryable tells whether an answer with status may be retried: a 429 always (API Gateway's
// throttling: nothing was done); a 503, and API Gateway's 502 (the function failed) and 504 (it
// timed out), when doing the request again is harmless (a read, or a create with its key), since
// the write may have committed; and the 409 of a create whose key is in flight. Any other status
// is the API's final word.
func retryable(r request, status int) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return r.repeatable()
	case http.StatusConflict:
		return r.key != ""
	}
	return false
}

// repeatable tells whether the request may be sent again after an attempt whose outcome is
// unknown: a read, or a create, whose Idempotency-Key makes a second attempt return the first's
// answer. A task's or a reference's retry has no key: sent again after it was done, it could
// retry a task that had failed again meanwhile.
func (r request) repeatable() bool { return r.method == http.MethodGet || r.key != "" }

// notSent tells whether a connection error happened before the request could reach the API: the
// connection was never made (refused, no route, DNS), so nothing was done.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (c *Client) attempt(ctx context.Context, r request) (*response, error) {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + r.path
	var err error
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		return nil, &localError{err}
	}
	u.RawQuery = r.query.Encode()
	var body io.Reader = http.NoBody
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, &localError{err}
	}
	// A retry is this client's to decide (bounded by MaxAttempts, after its backoff), not net/http's,
	// which resends by itself a request with an Idempotency-Key whose body it can rewind, when a
	// reused connection breaks: so the body cannot be rewound, not even an empty one.
	req.GetBody = nil
	if r.body == nil && r.key != "" {
		req.Body = io.NopCloser(strings.NewReader(""))
	}
	req.Header.Set("Accept", "application/json")
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.key != "" {
		req.Header.Set("Idempotency-Key", r.key)
	}
	if c.opt.Credentials != nil {
		creds, err := c.opt.Credentials.Retrieve(ctx)
		if err != nil {
			return nil, &localError{fmt.Errorf("client: AWS credentials: %w", err)}
		}
		sum := sha256.Sum256(r.body)
		if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "execute-api", c.opt.Region, time.Now()); err != nil {
			return nil, &localError{fmt.Errorf("client: sign: %w", err)}
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: got}, nil
}

// localError is an attempt's failure before anything was sent (credentials, signing): retrying
// cannot help.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// newIdempotencyKey is a fresh key: 128 random bits.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = cryptoRead(b[:])
	return "eo-" + hex.EncodeToString(b[:])
}

var cryptoRead = crand.Read

func decode(resp *response, v any) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("client: the API's answer is not the JSON expected: %w", err)
	}
	return nil
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
