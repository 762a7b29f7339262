// Package api is the HTTP API, one net/http handler served locally as a plain HTTP server and on
// Lambda behind API Gateway (REST API proxy integration) through aws-lambda-go-api-proxy.
//
//	POST /events        201 {"id", "value", ...}   create an event, processed synchronously
//	POST /events/async  202 {"id"}                 create a pending event and queue it
//	GET  /events        200 {"count"}              count events; with ?state=, list them (console.go)
//	GET  /events/{id}   200 {"id", "value", ...}   one event; 404 unknown; 400 not a positive integer, or out of range
//	GET  /counters/{userId}               200 {"userId", "counters"}   a user's counts (counters.go)
//	GET  /counters/{userId}/{entityType}  200 {"userId", "entityType", "sum", "version"}   one count
//
// Both creates take an Idempotency-Key header: a repeat gets the first answer (idempotency.go).
//
//	GET  /agents        200 {"agents": [...]}      the registered agents, ordered by id (agents.go)
//	GET  /workers       200 {"workers": [...]}     the event workers' registry; ?active=true|false (workers.go)
//	GET  /workers/{workerId}  200 {"workerId", ...}   one event worker; 404 unknown
//
// POST /events/async with a url creates a task, an event that carries a webhook (tasks.go):
//
//	GET  /events/{id}/attempts              200 {"id", "attempts": [...]}   a task's delivery attempts
//	GET  /references/{referenceId}/events   200 {"referenceId", "events", "next"}   its tasks in delivery order
//	POST /events/{id}/retry                 200 {"id", "state", "placement"}   a failed task, again
//
// The operators' console reads (console.go):
//
//	GET  /overview                          200 {"time", "events", "waiting", "oldestWaitingSeconds"}   events by state, exact
//	GET  /history                           200 {"time", "total", "events", "pages", "archive"}   the history by tier (history.go)
//	POST /references/{referenceId}/retry    200 {"referenceId", "retried", "placement", "more"}   its failed tasks, again, in order, in parts
//
// The API's contract (exactlyonce.OpenAPI, openapi.yaml at the module's root), which describes every
// route here; the tests validate every request and answer against it (internal/openapitest):
//
//	GET  /openapi.yaml                      200 the OpenAPI 3.1 document, application/yaml
//
// The routes are registered one a line in routes(), and routed by an http.ServeMux (router.go).
// Any other path is a 404, and a known path with another method a 405 with an Allow header; HEAD
// is not GET, and no path is ever cleaned or redirected.
//
// Every error is JSON {"error": "..."}, with a status from one table (statusOf); internal error text
// never reaches the caller.
package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
)

// EventStore is what the API needs of the events (internal/mysql/eventstore implements it): the
// plain creates, an event, the count.
type EventStore interface {
	CreateProcessed(ctx context.Context, value string) (exactlyonce.Event, error)
	CreatePendingBatch(ctx context.Context, n int) ([]int64, error)
	Get(ctx context.Context, id int64) (exactlyonce.Event, error)
	Count(ctx context.Context) (int64, error)
}

// Stores are the stores the API reads and writes, each the interface of what it uses of it. Events
// is required. A route whose store is nil answers as its interface says: GET /agents and
// GET /workers an empty list, the counters 404, keyed creates, tasks and the operators' reads an
// internal error. internal/wire gives every one (wire.Stores.API).
type Stores struct {
	Events   EventStore
	Console  ConsoleStore
	Tasks    TaskStore
	Keys     KeyStore
	Counters CounterReader
	Agents   AgentLister
	Workers  WorkerLister
	History  HistoryReader
}

// DefaultMaxBodyBytes caps request bodies: a task's payload may be 256 KiB, and the cap leaves room
// for the rest of its create and for JSON escapes, so that a payload a little too large is told so
// (a 400 naming the field) rather than cut off.
const DefaultMaxBodyBytes = 512 << 10

// DefaultBodyReadTimeout bounds reading a request's body, from the moment the handler gets the
// request: generous for 64 KiB on any link a client would use, and short enough that a client that
// declares a body and never sends it does not hold a connection and a goroutine for long.
const DefaultBodyReadTimeout = 10 * time.Second

// DefaultReadTimeout bounds a GET's work (Server.ReadTimeout): its reads of the database and of
// the history's archive together. Each call to S3 is bounded (archive.DefaultTimeout, 5 s), but a
// read may make many (a reference's listing reads each archived task's page), so an S3 that answers
// slowly, each call inside its own bound, would hold a request for as many bounds. 8 s is inside
// the API function's 10 s timeout (infra's apiTimeout), so that the caller gets a 503 with
// Retry-After from the API, not a timeout from the gateway.
const DefaultReadTimeout = 8 * time.Second

// eTIMEOUT is the code of a body that did not arrive in time: a 408. It is the API's own, as the
// case exists only at the HTTP edge.
const eTIMEOUT = "body_timeout"

// Server is the API handler.
type Server struct {
	Stores
	// Queue receives a message naming each async event. Nil: async events are left to the sweeper.
	Queue queue.Sender
	// AsyncGroup groups the async events of concurrent requests into one INSERT and one message,
	// or, Inline (on Lambda), stores and queues each in its request's goroutine (group.go).
	AsyncGroup AsyncGroup
	// Metrics, when set, records the requests' metrics (events created, replays, queue sends, the
	// store's transactions), also those of the groups and the outbox, which run on no request's
	// context. Nil: only what the request's context carries, if anything (on Lambda,
	// wire.Invocation's).
	Metrics      *metrics.Recorder
	Logger       *slog.Logger
	MaxBodyBytes int64 // default DefaultMaxBodyBytes
	// BodyReadTimeout bounds reading a request's body, where the server lets a handler set a read
	// deadline (net/http's; on Lambda the body has arrived before the handler runs). Default
	// DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration
	// ReadTimeout bounds each GET's (and HEAD's) work, its reads of the database and the archive
	// together: past it the request is a 503 with Retry-After. Default DefaultReadTimeout.
	ReadTimeout time.Duration
	NewValue    func() string // default exactlyonce.NewValue

	// Idempotency configures the Idempotency-Key header of the creates (idempotency.go).
	Idempotency Idempotency

	// Webhook is the delivery's address rule (WEBHOOK_ALLOW_LOOPBACK, WEBHOOK_ALLOW_PRIVATE: the
	// deliverers' own settings): a task whose url's host is an address it forbids, or a numeric form
	// resolvers disagree on, is refused at create (tasks.go). The zero Policy allows only global
	// addresses, as a deliverer's does. Names are checked where they are dialled.
	Webhook webhook.Policy
	// OwnHost, when set, names the host a request came in by (the API function: API Gateway's
	// requestContext.domainName, the execute-api domain or a custom one), which a task's url may not
	// name either (webhook.Policy.OwnHosts): with the API open to unsigned requests, a task there
	// would make a task of each of its deliveries, without end.
	OwnHost func(r *http.Request) string

	routesOnce sync.Once
	router     *router
	groupsOnce sync.Once
	groups     *asyncGroups
	keysOnce   sync.Once
	keys       *keyGroups
}

// statusOf maps domain error codes to HTTP statuses, once.
var statusOf = map[string]int{
	exactlyonce.EINVALID:     http.StatusBadRequest,
	exactlyonce.ENOTFOUND:    http.StatusNotFound,
	exactlyonce.EMETHOD:      http.StatusMethodNotAllowed,
	exactlyonce.ETOOLARGE:    http.StatusRequestEntityTooLarge,
	eTIMEOUT:                 http.StatusRequestTimeout,
	exactlyonce.EUNAVAILABLE: http.StatusServiceUnavailable,
	exactlyonce.ECONFLICT:    http.StatusConflict,
	exactlyonce.ESTATE:       http.StatusConflict,
	eKEYMISMATCH:             http.StatusUnprocessableEntity,
	exactlyonce.EINTERNAL:    http.StatusInternalServerError,
}

// EventJSON is an event as the API shows it.
type EventJSON struct {
	ID           int64      `json:"id"`
	Value        *string    `json:"value"`
	State        string     `json:"state"`
	CreatedAt    *time.Time `json:"createdAt,omitempty"`
	ProcessedAt  *time.Time `json:"processedAt,omitempty"`
	ProcessedBy  string     `json:"processedBy,omitempty"`
	ProcessCount int        `json:"processCount"`
	// Attempts, LastError and NextAttemptAt appear once the event's work has failed: how often, the
	// last reason, and when it may be tried again (while it waits; a failed event has none).
	Attempts      int        `json:"attempts,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
	NextAttemptAt *time.Time `json:"nextAttemptAt,omitempty"`
}

func toJSON(e exactlyonce.Event) EventJSON {
	j := EventJSON{ID: e.ID, Value: e.Value, State: e.State.String(), ProcessedAt: e.ProcessedAt,
		ProcessedBy: e.ProcessedBy, ProcessCount: e.ProcessCount, Attempts: e.Attempts, LastError: e.LastError,
		NextAttemptAt: e.NextAttemptAt}
	if !e.CreatedAt.IsZero() {
		j.CreatedAt = &e.CreatedAt
	}
	return j
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.routesOnce.Do(func() { s.router = s.routes() })
	// Every answer is of the type it declares and no other: it may carry what callers stored (a
	// task's payload and url, a receiver's error text), which no browser is to sniff into markup.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	s.bodyDeadline(w, r)
	if s.Metrics != nil {
		r = r.WithContext(metrics.With(r.Context(), s.Metrics))
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		// A read changes nothing, so cutting it short is safe: it is a 503 (its context's deadline
		// ends a statement or an S3 call as EUNAVAILABLE), never a request held for as long as the
		// archive is slow.
		ctx, cancel := context.WithTimeout(r.Context(), cmp.Or(s.ReadTimeout, DefaultReadTimeout))
		defer cancel()
		r = r.WithContext(ctx)
	}
	s.router.ServeHTTP(w, r)
}

// bodyDeadline bounds reading the body of a request that has one (a declared length, or chunked),
// so that a client that stops sending holds its connection no longer than BodyReadTimeout: whether
// the handler reads the body (readEmptyObject), or net/http reads and discards it after the
// answer. Until the body is read the answer says Connection: close, so that net/http writes it at
// once instead of first reading what is left of the body, which may never come. A request without
// a body gets no deadline: net/http would take it passing during a slow answer for the client
// hanging up, and cancel the request's context.
func (s *Server) bodyDeadline(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		return
	}
	err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyReadTimeout()))
	if err == nil && r.ProtoMajor == 1 { // HTTP/2 would close every stream of the connection
		w.Header().Set("Connection", "close")
	}
	// Otherwise the server cannot set one (http.ErrNotSupported): on Lambda the body is in memory.
}

// bodyRead is called once the body has been read to its end: the connection may serve the next
// request. (net/http lifts the read deadline itself when a body ends, so that it cannot pass during
// the rest of the request.)
func (s *Server) bodyRead(w http.ResponseWriter) {
	w.Header().Del("Connection")
}

func (s *Server) bodyReadTimeout() time.Duration {
	if s.BodyReadTimeout > 0 {
		return s.BodyReadTimeout
	}
	return DefaultBodyReadTimeout
}

// routes are the API's routes, one a line (router.go): the table of the package comment. A route
// that takes no query parameter is wrapped in noQuery.
func (s *Server) routes() *router {
	rt := newRouter(s.notFound, s.methodNotAllowed)
	rt.handle("POST /events", s.noQuery("POST /events", s.create))
	rt.handle("POST /events/async", s.noQuery("POST /events/async", s.createAsync))
	rt.handle("GET /events", s.events)
	rt.handle("GET /events/{id}", s.noQuery("GET /events/{id}", s.get))
	rt.handle("GET /events/{$}", s.get) // an empty id, a 400 as it always was, not a 404

	// The counter service's counts (counters.go).
	rt.handle("GET /counters/{userId}", s.counterSums)
	rt.handle("GET /counters/{userId}/{entityType}", s.noQuery("GET /counters/{userId}/{entityType}", s.counterSum))
	rt.handle("GET /agents", s.noQuery("GET /agents", s.listAgents))
	rt.handle("GET /workers", s.listWorkers)
	rt.handle("GET /workers/{workerId}", s.noQuery("GET /workers/{workerId}", s.getWorker))

	// Tasks (tasks.go).
	rt.handle("GET /events/{id}/attempts", s.attempts)
	rt.handle("POST /events/{id}/retry", s.noQuery("POST /events/{id}/retry", s.retry))
	rt.handle("GET /references/{referenceId}/events", s.referenceEvents)

	// The operators' console (console.go).
	rt.handle("GET /overview", s.noQuery("GET /overview", s.overview))
	rt.handle("GET /history", s.noQuery("GET /history", s.history)) // history.go
	rt.handle("POST /references/{referenceId}/retry", s.noQuery("POST /references/{referenceId}/retry", s.retryReference))

	// The API's OpenAPI document (openapi.yaml at the module's root).
	rt.handle("GET /openapi.yaml", s.openAPI)
	return rt
}

// openAPI answers GET /openapi.yaml: the document every route, body and answer is checked against.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(exactlyonce.OpenAPI)
}

// noQuery serves h, the handler of route, a route that takes no query parameter: a request with one
// is a 400 naming it, before anything is read or written, where it was ignored: POST
// /events?async=true created a processed event, GET /agents?state=RUNNING listed every agent.
// GET /openapi.yaml is left to take any (a cache-buster a documentation tool adds).
func (s *Server) noQuery(route string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := parseQuery(r.URL.RawQuery)
		if err == nil && len(q) > 0 {
			err = exactlyonce.Errorf(exactlyonce.EINVALID, "unknown query parameter %q: %s takes none",
				sanitize(slices.Min(slices.Collect(maps.Keys(q)))), route)
		}
		if err != nil {
			s.error(w, r, err)
			return
		}
		h(w, r)
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	key, keyed, err := s.idempotencyKey(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	body, err := s.readEmptyObject(w, r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if keyed {
		s.createKeyed(w, r, key, body, false, nil)
		return
	}
	newValue := s.NewValue
	if newValue == nil {
		newValue = exactlyonce.NewValue
	}
	e, err := s.Events.CreateProcessed(r.Context(), newValue())
	if err != nil {
		s.error(w, r, err)
		return
	}
	metrics.From(r.Context()).Add(metrics.EventsCreatedSync, 1)
	writeJSON(w, http.StatusCreated, toJSON(e))
}

// addresses is the address rule a task's url is checked by at create: Webhook's, and the host r
// came in by (OwnHost) refused with the system's own API hosts.
func (s *Server) addresses(r *http.Request) webhook.Policy {
	p := s.Webhook
	if s.OwnHost != nil {
		if h := s.OwnHost(r); h != "" {
			p.OwnHosts = append(slices.Clip(p.OwnHosts), h)
		}
	}
	return p
}

func (s *Server) createAsync(w http.ResponseWriter, r *http.Request) {
	key, keyed, err := s.idempotencyKey(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	task, err := parseTask(body, s.addresses(r))
	if err != nil {
		s.error(w, r, err)
		return
	}
	if keyed {
		s.createKeyed(w, r, key, body, true, task)
		return
	}
	if task != nil {
		s.createTask(w, r, *task)
		return
	}
	id, err := s.asyncGroups().create(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	metrics.From(r.Context()).Add(metrics.EventsCreatedAsync, 1)
	writeJSON(w, http.StatusAccepted, map[string]int64{"id": id})
}

// Drain sends the queue messages still held for committed events (AsyncGroup.Linger), without
// lingering, and returns when they are sent or ctx is done. Call it after the HTTP server has shut
// down, so that no request adds more; what it cannot send is left to the sweeper.
func (s *Server) Drain(ctx context.Context) error {
	return s.asyncGroups().drain(ctx)
}

// asyncGroups returns the server's async groups, made on first use from AsyncGroup.
func (s *Server) asyncGroups() *asyncGroups {
	s.groupsOnce.Do(func() { s.groups = newAsyncGroups(s) })
	return s.groups
}

func (s *Server) count(w http.ResponseWriter, r *http.Request) {
	n, err := s.Events.Count(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int64{"count": n})
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id, err := s.eventID(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	e, err := s.Events.Get(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if e.Task != nil {
		writeJSON(w, http.StatusOK, taskJSON(e))
		return
	}
	writeJSON(w, http.StatusOK, toJSON(e))
}

// jsonSpace is the whitespace JSON allows around a value (RFC 8259): a body of only these is no body.
const jsonSpace = " \t\r\n"

// readEmptyObject accepts no body (or only JSON whitespace), or a JSON object with no fields, within
// the size limit. Anything else is refused: other JSON values such as null, and fields, which are
// refused rather than ignored so that a client expecting them to be used is told they are not.
//
// A body declared longer than the limit is refused before a byte of it is read; one that does not
// arrive within BodyReadTimeout (bodyDeadline) is a 408. It returns the body as read (a keyed
// create's fingerprint hashes it).
func (s *Server) readEmptyObject(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	fields, err := jsonObject(body)
	if err != nil {
		return nil, err
	}
	for k := range fields {
		if slices.Contains(taskFields, k) { // a task, sent to the wrong route
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "unknown field %q: POST /events creates a plain event; "+
				"create a task (url, payload, referenceId, maxRetries) with POST /events/async", k)
		}
		return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "unknown field %q: the value is generated by the service", sanitize(k))
	}
	return body, nil
}

// jsonObject reads a body that must be a JSON object, or nothing (only JSON whitespace): its fields,
// none for no body. It is the one reader of every request body (exactlyonce.DecodeObject): a field
// given twice is an EINVALID error naming it, and so is any other JSON value, such as null.
func jsonObject(body []byte) (map[string]json.RawMessage, error) {
	if len(bytes.TrimLeft(body, jsonSpace)) == 0 {
		return nil, nil
	}
	fields, err := exactlyonce.DecodeObject(body)
	var notObject *exactlyonce.NotObjectError
	switch {
	case !errors.As(err, &notObject):
	case notObject.TooDeep:
		return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "request body nests values more than %d deep", exactlyonce.MaxJSONDepth)
	case notObject.Syntax: // a malformed object is not "not an object": say where it broke
		return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "request body is not valid JSON (at offset %d)", notObject.Offset)
	case notObject.Trailing:
		return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "request body must be one JSON object, with nothing after it")
	default:
		return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "request body must be a JSON object")
	}
	return fields, err
}

// readBody reads the request's body within the size limit. A body declared longer than the limit
// is refused before a byte of it is read; one that does not arrive within BodyReadTimeout
// (bodyDeadline) is a 408.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	limit := s.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	// A body sent compressed was read as it came, so that a gzip'd {} was "not valid JSON (at
	// offset 1)" and a plain one declared gzip was taken: the coding is refused, by name.
	for _, coding := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(coding, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "Content-Encoding %q is not supported: send the body uncompressed", sanitize(c))
			}
		}
	}
	tooLarge := exactlyonce.Errorf(exactlyonce.ETOOLARGE, "request body is larger than %d bytes", limit)
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &maxBytes):
		return nil, tooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, exactlyonce.Errorf(eTIMEOUT, "the request body did not arrive within %s", s.bodyReadTimeout())
	case err != nil:
		return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "could not read the request body")
	}
	s.bodyRead(w)
	return body, nil
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.error(w, r, exactlyonce.Errorf(exactlyonce.ENOTFOUND, "no route for %s %s", r.Method, sanitize(r.URL.Path)))
}

func (s *Server) methodNotAllowed(w http.ResponseWriter, _ *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed; use " + allow})
}

func (s *Server) error(w http.ResponseWriter, r *http.Request, err error) {
	code := exactlyonce.ErrorCode(err)
	status, ok := statusOf[code]
	if !ok {
		status = http.StatusInternalServerError
	}
	switch {
	case status >= 500 && errors.Is(r.Context().Err(), context.Canceled):
		// The caller went away (a client's timeout, a closed connection: net/http cancels the
		// request's context), which cut the work short: nothing for a person to look at. A deadline
		// (a Lambda's) is not this: it stays an error.
		s.logger().Info("api: request abandoned by its caller", "method", r.Method, "path", sanitize(r.URL.Path), "status", status, "err", err)
	case status >= 500:
		s.logger().Error("api: request failed", "method", r.Method, "path", sanitize(r.URL.Path), "status", status, "err", err)
	}
	// Retry-After where repeating the request is worth it: a dependency down, or an idempotency
	// key still in flight (ECONFLICT); not a 409 of a state that a second later is the same
	// (ESTATE: a retry of a task that has not failed).
	if status == http.StatusServiceUnavailable || code == exactlyonce.ECONFLICT {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, map[string]string{"error": exactlyonce.ErrorMessage(err)})
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sanitize bounds caller-supplied text echoed in messages.
func sanitize(s string) string {
	const max = 64
	s = strings.ToValidUTF8(s, "?")
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strings.ToValidUTF8(s, "")
}
