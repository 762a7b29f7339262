package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// DefaultTimeout bounds one delivery when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// MessageBodyBytes is how much of a failed answer's body a Result's Message keeps.
const MessageBodyBytes = 1024

// drainBytes is how much more of an answer's body is read and discarded, so that a short answer
// leaves its connection reusable; a longer one is cut, and its connection closed.
const drainBytes = 4096

// Config configures a Client. Zero fields take the defaults named.
type Config struct {
	// Key signs every request (ParseSecret decodes it from WEBHOOK_SECRET). Required: New panics
	// without one, as every receiver would reject unsigned deliveries.
	Key []byte
	// Timeout is WEBHOOK_TIMEOUT: how long one delivery may take, from dialling to the answer's
	// status (DefaultTimeout).
	Timeout time.Duration
	// AllowLoopback is WEBHOOK_ALLOW_LOOPBACK: allow 127.0.0.0/8 and ::1 (local runs and tests).
	AllowLoopback bool
	// AllowPrivate is WEBHOOK_ALLOW_PRIVATE: allow RFC 1918 and fc00::/7 (receivers inside a VPC),
	// less the cloud metadata endpoints in fc00::/7, refused whatever the settings (address.go).
	AllowPrivate bool
	// LambdaRuntimeAPI is AWS_LAMBDA_RUNTIME_API, the address of the Lambda Runtime API of the
	// environment the process runs in ("127.0.0.1:9001"), empty outside Lambda: refused whatever
	// the settings (Policy.LambdaRuntimeAPI).
	LambdaRuntimeAPI string
	// OwnHosts are WEBHOOK_API_HOSTS: the host names of the system's own API, which no delivery may reach
	// whatever the settings (Policy.OwnHosts).
	OwnHosts []string
	// UserAgent is the User-Agent header (DefaultUserAgent).
	UserAgent string
	// Resolver resolves the url's host (nil: net.DefaultResolver). Tests point it at a responder of
	// their own. Whatever it answers, the address rule is applied to each address as it is dialled
	// (net.Dialer.Control), so it cannot let a forbidden address through.
	Resolver *net.Resolver
}

// Policy is the address rule cfg asks for: what its Client dials, and what the API accepts in a
// task's url.
func (cfg Config) Policy() Policy {
	return Policy{AllowLoopback: cfg.AllowLoopback, AllowPrivate: cfg.AllowPrivate, LambdaRuntimeAPI: cfg.LambdaRuntimeAPI,
		OwnHosts: cfg.OwnHosts}
}

// Client delivers tasks. It is safe for concurrent use, and keeps connections to receivers open
// between deliveries.
type Client struct {
	http      *http.Client
	key       []byte
	timeout   time.Duration
	userAgent string
	policy    Policy
}

// New returns a Client for cfg. It panics if cfg.Key is empty.
func New(cfg Config) *Client {
	if len(cfg.Key) == 0 {
		panic("webhook: Config.Key is empty: every delivery must be signed (see ParseSecret)")
	}
	c := &Client{
		key:       bytes.Clone(cfg.Key),
		timeout:   cfg.Timeout,
		userAgent: cfg.UserAgent,
		policy:    cfg.Policy(),
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.userAgent == "" {
		c.userAgent = DefaultUserAgent
	}
	dialer := &net.Dialer{
		Timeout:   c.timeout,
		KeepAlive: 30 * time.Second,
		Resolver:  cfg.Resolver,
		// Control runs for every address the dialer tries, after resolution, on the socket about
		// to connect: the address checked is the address dialled.
		Control: c.control,
	}
	transport := &http.Transport{
		// Never a proxy from the environment: the connection would go to the proxy's address, and
		// the proxy would reach the forbidden one on our behalf.
		Proxy:       nil,
		DialContext: dialer.DialContext,
		// TLSClientConfig nil: the default verification against the system roots.
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    c.timeout,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    32,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	c.http = &http.Client{
		Transport: transport,
		// A redirect is not followed: it is the answer, a permanent failure (3xx).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// control refuses a socket about to connect to an address the policy forbids.
func (c *Client) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{What: fmt.Sprintf("an address that cannot be checked (%q)", address)}
	}
	if e := c.policy.check(ap.Addr()); e != nil {
		return e
	}
	if e := c.policy.checkPort(ap.Addr(), ap.Port()); e != nil {
		return e
	}
	return nil
}

// Request is one attempt at delivering a task.
type Request struct {
	// ID is the webhook-id header: the task's id, the same on every attempt, so a receiver can drop
	// duplicates.
	ID string
	// URL is where to POST; ValidateURL's rules apply.
	URL string
	// Payload is the body, sent exactly as given (JSON).
	Payload []byte
}

// Outcome is how an attempt ended. The zero Outcome is none of them, so a zero Result is never
// taken for a delivery.
type Outcome int

const (
	// Delivered: the receiver answered 2xx within the timeout.
	Delivered Outcome = iota + 1
	// Temporary: a connection error, a timeout, 408, 429 or 5xx. Retry after RetryDelay.
	Temporary
	// Permanent: any other status (3xx, 4xx, 1xx), or a url that fails ValidateURL. Do not retry.
	Permanent
	// Refused: the url's host is, or resolves to, an address the rule forbids (see address.go). No
	// connection was made. A permanent failure: do not retry. (A name resolving to several
	// addresses is dialled at each in turn, each checked: a forbidden one is skipped and an allowed
	// one may be delivered to; when none connects, the first address's failure names the attempt,
	// so a name whose first address is forbidden and whose others are down is refused.)
	Refused
)

func (o Outcome) String() string {
	switch o {
	case Delivered:
		return "delivered"
	case Temporary:
		return "temporary"
	case Permanent:
		return "permanent"
	case Refused:
		return "refused"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Final reports whether no further attempt should be made: delivered, permanent or refused.
func (o Outcome) Final() bool { return o != Temporary }

// Result is what an attempt did.
type Result struct {
	Outcome Outcome
	// Status is the answer's HTTP status, 0 if there was none.
	Status int
	// RetryAfter is the answer's Retry-After (seconds or an HTTP date), 0 if none or in the past.
	RetryAfter time.Duration
	// Message is the exceptionMessage: "HTTP 503: " followed by at most the first 1 KiB of the
	// answer's body, or the error, or why the delivery was refused; empty when delivered. Always
	// valid UTF-8 (invalid bytes become U+FFFD).
	Message string
	// Started is when the attempt started, and Duration how long it took.
	Started  time.Time
	Duration time.Duration
}

// Deliver makes one attempt at POSTing r.Payload to r.URL, and classifies the result. It never
// returns without a Result; it spends at most the Config's Timeout, or less if ctx ends sooner (the
// Result is then Temporary, and ctx.Err() says why).
func (c *Client) Deliver(ctx context.Context, r Request) Result {
	start := time.Now()
	res := c.deliver(ctx, r, start)
	res.Started = start
	res.Duration = time.Since(start)
	res.Message = validUTF8(res.Message, MessageBodyBytes+256)
	return res
}

func (c *Client) deliver(ctx context.Context, r Request, start time.Time) Result {
	if err := ValidateURL(r.URL); err != nil {
		return Result{Outcome: Permanent, Message: err.Error()}
	}
	if r.ID == "" {
		return Result{Outcome: Permanent, Message: "task has no webhook id"}
	}
	u, err := url.Parse(r.URL)
	if err != nil { // ValidateURL parsed it already
		return Result{Outcome: Permanent, Message: "url is not a valid url"}
	}
	if e := c.policy.CheckHost(u.Hostname()); e != nil {
		return Result{Outcome: Refused, Message: e.Error()}
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Payload))
	if err != nil {
		return Result{Outcome: Permanent, Message: "url is not a valid url"}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set(HeaderID, r.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(start.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(c.key, r.ID, start, r.Payload))

	resp, err := c.http.Do(req)
	if err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			// CheckHost passed the host, so it is a name, and the address its resolution's.
			refused.Host, refused.Resolved = u.Hostname(), true
			return Result{Outcome: Refused, Message: refused.Error()}
		}
		return Result{Outcome: Temporary, Message: c.errorText(parent, ctx, err)}
	}
	defer resp.Body.Close()

	res := Result{Status: resp.StatusCode}
	// The body: at most MessageBodyBytes kept, a little more read and discarded so that a short
	// answer's connection can be reused; the rest is never read. A read error (the timeout
	// striking mid-body) keeps what was read: the status decides.
	head, _ := io.ReadAll(io.LimitReader(resp.Body, MessageBodyBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))

	switch s := resp.StatusCode; {
	case s >= 200 && s <= 299:
		res.Outcome = Delivered
		return res
	case s == http.StatusRequestTimeout, s == http.StatusTooManyRequests, s >= 500:
		res.Outcome = Temporary
	default:
		res.Outcome = Permanent
	}
	res.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	res.Message = fmt.Sprintf("HTTP %d", resp.StatusCode)
	if len(head) > 0 {
		res.Message += ": " + validUTF8(string(head), MessageBodyBytes)
	}
	return res
}

// errorText describes a failed request without the url (the caller knows it): the caller's context
// ending as such, the delivery's timeout as a timeout, else the innermost useful error.
func (c *Client) errorText(parent, ctx context.Context, err error) string {
	if perr := parent.Err(); perr != nil {
		return "stopped before an answer: " + context.Cause(parent).Error()
	}
	if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("timeout: no answer within %s", c.timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	// The message is the task's exceptionMessage, which every reader of the API sees: it names the
	// receiver's address, never one of ours. An error on an open connection names its local end
	// ("read tcp 10.0.3.17:41234->..."), on AWS the function's private address in the VPC, and a
	// failed lookup the resolver it asked ("lookup x on 10.0.0.2:53"), the VPC's DNS. The errors
	// are this attempt's own, so they are changed in place.
	var op *net.OpError
	if errors.As(err, &op) {
		op.Source = nil
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		dns.Server = ""
	}
	return err.Error()
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date, relative to now. 0
// if absent, malformed or past; at most a year.
func parseRetryAfter(v string, now time.Time) time.Duration {
	const most = 365 * 24 * time.Hour
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n > uint64(most/time.Second) {
			return most
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		if d < 0 {
			return 0
		}
		return min(d, most)
	}
	return 0
}

// validUTF8 returns s cut to at most n bytes at a character boundary, with invalid bytes replaced
// by U+FFFD.
func validUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
