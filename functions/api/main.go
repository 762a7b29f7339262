// Command api is the API Lambda: API Gateway REST API proxy events, served by internal/api.
package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

func main() {
	cfg := wire.Must(wire.Environment())
	log := wire.Logger(cfg)
	var q queue.Sender
	if cfg.QueueURL != "" {
		q = &queue.SQSSender{Client: wire.SQSOnFirstUse(log), QueueURL: cfg.QueueURL} // built at the first send
	}
	server := newServer(cfg, wire.Must(wire.OpenStores(context.Background(), cfg)), q, log)
	lambda.Start(handler(server, server, os.Stdout, log))
}

// newServer is the API as the Lambda serves it (wire.API), and each idempotency key scoped to the
// caller's IAM identity (callerScope). Inline: an async request is stored and its message sent in
// the request's own goroutine, under its context, and answered after both, because Lambda freezes
// the environment once the answer is returned: nothing of a request may run after it
// (api.AsyncGroup.Inline).
func newServer(cfg config.Config, stores *wire.Stores, q queue.Sender, log *slog.Logger) *api.Server {
	server := wire.API(cfg, stores, q, api.AsyncGroup{Inline: true}, log)
	server.Idempotency.Scope = callerScope
	server.OwnHost = requestDomain
	return server
}

// requestDomain is the domain the request came in by, as API Gateway says it (requestContext's
// domainName: the REST API's execute-api domain, or a custom domain mapped to it): a task's url
// may not name it (api.Server.OwnHost), beside the stack's WEBHOOK_API_HOSTS, so that a task is
// never delivered to this API, which with -c publicApi=true would make a task of each delivery.
func requestDomain(r *http.Request) string {
	rc, ok := core.GetAPIGatewayContextFromContext(r.Context())
	if !ok {
		return ""
	}
	return rc.DomainName
}

// handler is the Lambda's handler: server behind API Gateway's proxy adapter, its metrics recorded
// for one EMF line per invocation on out (wire.Invocation). h is what the adapter calls: server
// itself, or (in tests) server behind a check of its traffic.
func handler(server *api.Server, h http.Handler, out io.Writer, log *slog.Logger) func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	// Also the server's own: its keyed groups run on no request's context.
	server.Metrics = metrics.NewRecorder(metrics.PartAPI, true, nil)
	proxy := httpadapter.New(h).ProxyWithContext
	return wire.Invocation(server.Metrics, out, log, func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		req.Path = encodedPath(req.Path)
		return proxy(ctx, req)
	})
}

// encodedPath makes an event's path one the adapter can parse as a URL's path and decode, as
// make run's server decodes a request's: it percent-encodes every byte that an encoded path never
// holds as such (a '?', a '#', a space, a control character, a byte outside ASCII, a '%' not
// followed by two hex digits), and leaves the rest, "%2F" and "%3F" included, as written. API
// Gateway's REST API hands the path over encoded, which this leaves unchanged; a decoded one (an
// HTTP API's, a test's event) was cut at a '?' or '#', so the name after it went to another route,
// and one with a bare '%' failed the invocation ("invalid URL escape"), a 502 to the caller.
func encodedPath(p string) string {
	const hex = "0123456789ABCDEF"
	isHex := func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		keep := c > ' ' && c < 0x7f && c != '?' && c != '#' && c != '%' ||
			c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2])
		if keep {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// callerScope is the caller's identity as API Gateway authenticated it (the REST API's IAM
// authorisation, SigV4): its IAM ARN, which is part of every idempotency key, so that one caller
// never gets another's stored answer. A role's sessions are one caller: an assumed role's ARN
// (arn:aws:sts::<account>:assumed-role/<role>/<session>) and caller id (<role id>:<session>) are
// taken without the session's name, which differs from one ECS task, EC2 instance or process of a
// producer to the next, so that a create retried from another of them with the same key replays the
// first (it stored a second event). A request with no identity (an API without authorisation) has
// the empty scope, shared by all such callers.
func callerScope(r *http.Request) string {
	rc, ok := core.GetAPIGatewayContextFromContext(r.Context())
	if !ok {
		return ""
	}
	switch id := rc.Identity; {
	case id.UserArn != "":
		return "arn:" + withoutSession(id.UserArn)
	case id.Caller != "":
		caller := id.Caller
		if i := strings.IndexByte(caller, ':'); i > 0 {
			caller = caller[:i] // <role id>:<session>: the role's unique id
		}
		return "caller:" + rc.AccountID + ":" + caller
	}
	return ""
}

// withoutSession is an assumed role's ARN without its session name
// (arn:aws:sts::<account>:assumed-role/<role>/<session> -> .../assumed-role/<role>); any other ARN
// as it is.
func withoutSession(arn string) string {
	const marker = ":assumed-role/"
	i := strings.Index(arn, marker)
	if i < 0 || !strings.HasPrefix(arn, "arn:") {
		return arn
	}
	rest := arn[i+len(marker):]
	if j := strings.LastIndexByte(rest, '/'); j > 0 {
		return arn[:i+len(marker)+j]
	}
	return arn
}
