package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CreateOption modifies one create.
type CreateOption func(*request)

// WithIdempotencyKey sends key as the create's Idempotency-Key instead of a generated one: the
// caller's own name for the logical create (an order's id), so that its retries across processes
// are one create too.
func WithIdempotencyKey(key string) CreateOption {
	return func(r *request) { r.key = key }
}

func (c *Client) create(ctx context.Context, path string, body []byte, opts []CreateOption) (*response, error) {
	r := request{method: http.MethodPost, path: path, body: body, key: newIdempotencyKey()}
	for _, o := range opts {
		o(&r)
	}
	const bad = "Idempotency-Key must be 1-255 visible ASCII characters, bare or in double quotes: "
	switch {
	case r.key == "":
		// Sent without a key, the create would be retried with nothing to match its attempts.
		return nil, refused("Idempotency-Key", bad+"it is empty")
	case strings.ContainsFunc(r.key, func(c rune) bool { return c < 0x20 || c == 0x7f }):
		// net/http refuses to send it: not a connection error to retry, the caller's mistake.
		return nil, refused("Idempotency-Key", bad+"a character that is not visible ASCII")
	}
	return c.do(ctx, r)
}

// pathName checks a caller's value that is a segment of a request's path (a user id, an entity
// type, a referenceId, a worker id) as the API does (exactlyonce.CheckPathName, which the client, importing
// none of the service's packages, repeats; a test holds the two together), before anything is
// sent: escaped, a '/' would still split the segment, since the API decodes a path before it
// routes it. The error is the API's 400, with its message.
func pathName(field, v string) error {
	msg := ""
	switch n := utf8.RuneCountInString(v); {
	case !utf8.ValidString(v):
		msg = field + " must be valid UTF-8"
	case n < 1 || n > 255:
		msg = fmt.Sprintf("%s must be 1 to 255 characters, got %d", field, n)
	case strings.HasSuffix(v, " "):
		msg = field + " must not end with a space: the database would take it for the same name without one"
	case v == "." || v == "..":
		msg = field + ` must not be "." or "..": a URL path cannot carry it`
	case strings.ContainsAny(v, `/\`):
		msg = field + ` must not contain '/' or '\': it is a segment of a URL path`
	case strings.ContainsFunc(v, unicode.IsControl):
		msg = field + " must not contain control characters"
	default:
		return nil
	}
	return refused(field, msg)
}

// CreateEvent is POST /events: an event, processed at once.
func (c *Client) CreateEvent(ctx context.Context, opts ...CreateOption) (Event, error) {
	var e Event
	resp, err := c.create(ctx, "/events", nil, opts)
	if err == nil {
		err = decode(resp, &e)
		e.Replayed = resp.header.Get("Idempotent-Replayed") == "true"
	}
	return e, err
}

// CreateAsyncEvent is POST /events/async: a pending event, processed by the processor or a sweeper.
func (c *Client) CreateAsyncEvent(ctx context.Context, opts ...CreateOption) (Created, error) {
	return c.createAsync(ctx, nil, opts)
}

// CreateTask is POST /events/async with a url: a task, its webhook delivered in order per
// ReferenceID.
func (c *Client) CreateTask(ctx context.Context, t NewTask, opts ...CreateOption) (Created, error) {
	body, err := taskBody(t)
	if err != nil {
		return Created{}, err
	}
	return c.createAsync(ctx, body, opts)
}

// taskBody is t as a request's body, its payload byte for byte as the caller gave it: the API stores
// and delivers it so (a receiver checks the signature of those bytes), where json.Marshal compacts a
// json.RawMessage and escapes <, > and & in it. A payload that is not JSON is the client's 400,
// before anything is sent.
func taskBody(t NewTask) ([]byte, error) {
	payload := t.Payload
	t.Payload = nil // omitempty: the rest of the task, marshalled as it always was
	body, err := json.Marshal(t)
	if err != nil || len(payload) == 0 {
		return body, err
	}
	if !json.Valid(payload) {
		return nil, refused("payload", "payload must be one JSON value (the client sends it as given)")
	}
	body = body[:len(body)-1] // the closing brace: url is always there, so a field precedes
	body = append(body, `,"payload":`...)
	body = append(body, payload...)
	return append(body, '}'), nil
}

func (c *Client) createAsync(ctx context.Context, body []byte, opts []CreateOption) (Created, error) {
	var out Created
	resp, err := c.create(ctx, "/events/async", body, opts)
	if err == nil {
		err = decode(resp, &out)
		out.Replayed = resp.header.Get("Idempotent-Replayed") == "true"
	}
	return out, err
}

func (c *Client) get(ctx context.Context, path string, query url.Values, v any) error {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: path, query: query})
	if err != nil {
		return err
	}
	return decode(resp, v)
}

func (c *Client) post(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, request{method: http.MethodPost, path: path})
	if err != nil {
		return err
	}
	return decode(resp, v)
}

func idPath(format string, id int64) string { return fmt.Sprintf(format, id) }

// seg is a caller's value as one segment of a path, escaped ('%', '?', '#', spaces). A '/' is
// checked out before (pathName): the API decodes the path before routing it, so an escaped '/'
// would still split the segment.
func seg(v string) string { return url.PathEscape(v) }

// GetEvent is GET /events/{id}: an event or a task.
func (c *Client) GetEvent(ctx context.Context, id int64) (Item, error) {
	var it Item
	err := c.get(ctx, idPath("/events/%d", id), nil, &it)
	return it, err
}

// CountEvents is GET /events: the exact count of events.
func (c *Client) CountEvents(ctx context.Context) (int64, error) {
	var out struct {
		Count int64 `json:"count"`
	}
	err := c.get(ctx, "/events", nil, &out)
	return out.Count, err
}

// ListEvents is GET /events?state=: a page of the events of one state, newest first. A page may
// hold fewer events than Limit, even none, and still have a Next (the processed history is read at
// most 20,000 ids a request; a page ends at 4 MiB or before the archive): the listing ends only
// where Next is nil, so follow Next (as Before) until then, not until a page comes back short.
func (c *Client) ListEvents(ctx context.Context, opt ListOptions) (EventPage, error) {
	q := url.Values{"state": {opt.State}}
	if opt.Kind != "" {
		q.Set("kind", opt.Kind)
	}
	if opt.Before != "" {
		q.Set("before", opt.Before)
	}
	if opt.Limit > 0 {
		q.Set("limit", strconv.Itoa(opt.Limit))
	}
	var page EventPage
	err := c.get(ctx, "/events", q, &page)
	return page, err
}

// TaskAttempts is GET /events/{id}/attempts: a task's delivery attempts, every page of them (the
// API answers up to 1,000 a request; a task keeps its attempts across manual retries).
func (c *Client) TaskAttempts(ctx context.Context, id int64) ([]Attempt, error) {
	all := []Attempt{}
	q := url.Values{}
	for {
		var page struct {
			Attempts []Attempt `json:"attempts"`
			Next     *int      `json:"next"`
		}
		if err := c.get(ctx, idPath("/events/%d/attempts", id), q, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Attempts...)
		if page.Next == nil || len(page.Attempts) == 0 {
			return all, nil
		}
		q.Set("after", strconv.Itoa(*page.Next))
	}
}

// RetryTask is POST /events/{id}/retry: a failed task, again. A task that has not failed is an
// ErrConflict. It has no Idempotency-Key: a 503 or a connection cut once it was sent is returned,
// not retried (the task may have been retried): look at the task before calling again.
func (c *Client) RetryTask(ctx context.Context, id int64) (RetriedTask, error) {
	var out RetriedTask
	err := c.post(ctx, idPath("/events/%d/retry", id), &out)
	return out, err
}

// ReferenceTasks is GET /references/{referenceId}/events: a page of a reference's tasks in
// delivery order, after the task after (0: from the first), at most limit (0: the API's default).
// As with ListEvents, the tasks end where Next is nil; a page may be short, or rarely empty, before.
func (c *Client) ReferenceTasks(ctx context.Context, referenceID string, after int64, limit int) (ReferencePage, error) {
	if err := pathName("referenceId", referenceID); err != nil {
		return ReferencePage{}, err
	}
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page ReferencePage
	err := c.get(ctx, "/references/"+seg(referenceID)+"/events", q, &page)
	return page, err
}

// RetryReference is POST /references/{referenceId}/retry: every failed task of a reference, again.
// The API retries a reference's failed tasks in parts and answers More while some remain; this
// calls it again until none does (as ListReference's callers follow pages), and returns every task
// retried, in order, and the placement the first call answered. Like RetryTask, a call is not
// retried after a 503 or a connection cut once it was sent: the error is returned with what the
// calls before it retried, and calling RetryReference again goes on where it stopped.
func (c *Client) RetryReference(ctx context.Context, referenceID string) (RetriedReference, error) {
	var all RetriedReference
	for {
		part, err := c.RetryReferencePart(ctx, referenceID)
		if err != nil {
			return all, err
		}
		if all.ReferenceID == "" {
			all.ReferenceID, all.Placement = part.ReferenceID, part.Placement
		}
		all.Retried = append(all.Retried, part.Retried...)
		if all.Placement == nil {
			all.Placement = part.Placement
		}
		if !part.More {
			if all.Retried == nil {
				all.Retried = []int64{}
			}
			return all, nil
		}
	}
}

// RetryReferencePart is one POST /references/{referenceId}/retry: the failed tasks the API
// retried within its budget, and More if some remain (call it again).
func (c *Client) RetryReferencePart(ctx context.Context, referenceID string) (RetriedReference, error) {
	var out RetriedReference
	if err := pathName("referenceId", referenceID); err != nil {
		return out, err
	}
	err := c.post(ctx, "/references/"+seg(referenceID)+"/retry", &out)
	return out, err
}

// Overview is GET /overview: the events by state, and how long the oldest has waited.
func (c *Client) Overview(ctx context.Context) (Overview, error) {
	var out Overview
	err := c.get(ctx, "/overview", nil, &out)
	return out, err
}

// History is GET /history: how much of the history each tier holds.
func (c *Client) History(ctx context.Context) (History, error) {
	var out History
	err := c.get(ctx, "/history", nil, &out)
	return out, err
}

// Agents is GET /agents: the agents and their hash ranges, by id.
func (c *Client) Agents(ctx context.Context) ([]Agent, error) {
	var out struct {
		Agents []Agent `json:"agents"`
	}
	err := c.get(ctx, "/agents", nil, &out)
	return out.Agents, err
}

// Workers is GET /workers: the event workers' registry; active nil lists live and done ones,
// true only the live ones, false only the done ones. The API ends the list at 1,000 workers or
// 4 MiB (live workers first); Truncated says it ended at 4 MiB with workers left out (each is
// still read by id: Worker).
func (c *Client) Workers(ctx context.Context, active *bool) (WorkerList, error) {
	q := url.Values{}
	if active != nil {
		q.Set("active", strconv.FormatBool(*active))
	}
	var out WorkerList
	err := c.get(ctx, "/workers", q, &out)
	return out, err
}

// Worker is GET /workers/{workerId}: one event worker, live or done. A workerId a path cannot
// carry (pathName: empty, a '/', ...) is refused before anything is sent, as the other calls'
// names are: sent, "" was GET /workers/ and "a/b" GET /workers/a/b, other routes.
func (c *Client) Worker(ctx context.Context, workerID string) (Worker, error) {
	var out Worker
	if err := pathName("workerId", workerID); err != nil {
		return out, err
	}
	err := c.get(ctx, "/workers/"+seg(workerID), nil, &out)
	return out, err
}

// UserCounts is GET /counters/{userId}: a user's counts by entity type, kept by the counter service,
// every page of them (the API answers up to 1,000 types a request).
func (c *Client) UserCounts(ctx context.Context, userID string) (map[string]Count, error) {
	if err := pathName("userId", userID); err != nil {
		return nil, err
	}
	all := map[string]Count{}
	q := url.Values{}
	for {
		var page struct {
			Counters map[string]Count `json:"counters"`
			Next     *string          `json:"next"`
		}
		if err := c.get(ctx, "/counters/"+seg(userID), q, &page); err != nil {
			return nil, err
		}
		for t, v := range page.Counters {
			all[t] = v
		}
		if page.Next == nil {
			return all, nil
		}
		if *page.Next <= q.Get("after") { // the types come in byte order: a next that does not move on would loop
			return nil, fmt.Errorf("client: GET /counters/%s: page after %q gave next %q", userID, q.Get("after"), *page.Next)
		}
		q.Set("after", *page.Next)
	}
}

// Count is GET /counters/{userId}/{entityType}: one count (0 at version 0 if unknown).
func (c *Client) Count(ctx context.Context, userID, entityType string) (Count, error) {
	var out Count
	if err := pathName("userId", userID); err != nil {
		return out, err
	}
	if err := pathName("entityType", entityType); err != nil {
		return out, err
	}
	err := c.get(ctx, "/counters/"+seg(userID)+"/"+seg(entityType), nil, &out)
	return out, err
}

// OpenAPIDocument is GET /openapi.yaml: the API's OpenAPI 3.1 document.
func (c *Client) OpenAPIDocument(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/openapi.yaml"})
	if err != nil {
		return nil, err
	}
	return resp.body, nil
}
