package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/exactlyonce/exactlyonce/internal/metrics"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
)

// Tasks (README, "Tasks and webhooks"): POST /events/async with a url stores a task, an event whose
// work is to POST its payload to the url, in order with the other tasks of its referenceId.
//
//	POST /events/async                      202 {"id"}    a task: {"url", "payload", "referenceId", "maxRetries"}
//	GET  /events/{id}/attempts              200 {"id", "attempts": [...], "next"}   ?after=<number>&limit=<n>
//	GET  /references/{referenceId}/events   200 {"referenceId", "events": [...], "next"}   ?after=<id>&limit=<n>
//	POST /events/{id}/retry                 200 {"id", "state", "placement"}   409 unless the task failed

// TaskStore is what tasks need of their store (internal/mysql/taskstore implements it), the
// console's bulk retry of a reference (RetryReference) included.
type TaskStore interface {
	CreateTasks(ctx context.Context, tasks []exactlyonce.NewTask) ([]exactlyonce.CreatedTask, error)
	AttemptsAfter(ctx context.Context, id int64, after, limit int) ([]exactlyonce.Attempt, error)
	ReferencePage(ctx context.Context, ref string, after int64, limit int) (tasks []exactlyonce.Event, more bool, err error)
	RetryTask(ctx context.Context, id int64) (exactlyonce.RetryPlacement, bool, error)
	RetryReference(ctx context.Context, ref string) (exactlyonce.RetriedReference, error)
}

// Attempts' page limits: a task keeps its attempts across manual retries (each adds up to
// maxRetries+1), so a page holds at most MaxAttemptsLimit of them, and ends before its attempts'
// JSON passes MaxListPayloadBytes (an error is up to 1,024 bytes, six times that escaped).
const (
	DefaultAttemptsLimit = 1000
	MaxAttemptsLimit     = 1000
)

// Reference listing limits.
const (
	DefaultReferenceLimit = 100
	MaxReferenceLimit     = 1000
)

func (s *Server) taskStore() (TaskStore, error) {
	if s.Tasks == nil {
		return nil, exactlyonce.Errorf(exactlyonce.EINTERNAL, "tasks are not available")
	}
	return s.Tasks, nil
}

// taskFields are the fields of a task's create.
var taskFields = []string{"url", "payload", "referenceId", "maxRetries"}

// parseTask reads a create's body: nil for no body or an empty object (a plain event), else the task
// it asks for. Every mistake is an EINVALID error naming its field; nothing is written before. The
// url's host must be one the deliverers' address rule allows (addresses.CheckURL).
func parseTask(body []byte, addresses webhook.Policy) (*exactlyonce.NewTask, error) {
	fields, err := jsonObject(body)
	if err != nil || len(fields) == 0 {
		return nil, err
	}
	for k := range fields {
		known := false
		for _, f := range taskFields {
			known = known || k == f
		}
		if !known {
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "unknown field %q: a task has url, payload, referenceId and maxRetries",
				sanitize(k))
		}
	}
	raw, ok := fields["url"]
	if !ok {
		return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "url is required: it is what makes the event a task")
	}
	t := &exactlyonce.NewTask{Payload: json.RawMessage("null"), MaxRetries: exactlyonce.DefaultTaskMaxRetries}
	if t.URL, err = exactlyonce.DecodeString("url", raw); err != nil {
		return nil, err
	}
	if err := addresses.CheckURL(t.URL); err != nil {
		var refused *webhook.RefusedError
		if errors.As(err, &refused) {
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "url: %s", refused.Reason())
		}
		// ValidateURL's messages name the url already ("url must be at most 2048 bytes, ...").
		msg := err.Error()
		if !strings.HasPrefix(msg, "url ") {
			msg = "url: " + msg
		}
		return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "%s", msg)
	}
	if p, ok := fields["payload"]; ok {
		if len(p) > exactlyonce.MaxTaskPayloadBytes {
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "payload is %d bytes; at most %d (256 KiB)", len(p), exactlyonce.MaxTaskPayloadBytes)
		}
		// encoding/json's reader lets invalid UTF-8 through inside strings, but it is not JSON text
		// (RFC 8259, 8.1): stored byte for byte, it would be delivered as it is and make every answer
		// that shows the task invalid JSON.
		if !utf8.Valid(p) {
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "payload must be valid UTF-8 (JSON text is UTF-8)")
		}
		if exactlyonce.LoneSurrogate(p) {
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "payload holds a lone UTF-16 surrogate escape (such as \\ud800): "+
				"it is no character (RFC 7493), and most JSON readers, Go's among them, read it as U+FFFD")
		}
		if d := exactlyonce.JSONDepth(p); d > exactlyonce.MaxTaskPayloadDepth {
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "payload nests values %d deep; at most %d", d, exactlyonce.MaxTaskPayloadDepth)
		}
		t.Payload = append(json.RawMessage(nil), p...)
	}
	if r, ok := fields["referenceId"]; ok {
		if t.ReferenceID, err = exactlyonce.DecodeString("referenceId", r); err != nil {
			return nil, err
		}
		if err := exactlyonce.CheckNewName("referenceId", t.ReferenceID); err != nil {
			return nil, err
		}
	}
	if m, ok := fields["maxRetries"]; ok {
		n, err := jsonInteger(m)
		if err != nil || n < 0 || n > exactlyonce.MaxTaskRetries {
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "maxRetries must be an integer from 0 to %d, got %s",
				exactlyonce.MaxTaskRetries, sanitize(string(m)))
		}
		t.MaxRetries = n
	}
	return t, nil
}

// jsonInteger reads a JSON number whose value is an integer, as JSON Schema's "integer" (the
// contract's type) takes one: 3, and also 3.0, 3e0 or -0; 2.5, a string or a number past float64's
// range is an error. Only small integers are read this way (maxRetries): float64 holds them exactly.
func jsonInteger(raw json.RawMessage) (int, error) {
	s := string(raw)
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, fmt.Errorf("not a number: %s", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<31 {
		return 0, fmt.Errorf("not an integer: %s", s)
	}
	return int(f), nil
}

// createTask stores one task and queues it if it heads its reference (a task queued behind another
// is handed on by the settlement of the one before it).
func (s *Server) createTask(w http.ResponseWriter, r *http.Request, t exactlyonce.NewTask) {
	ts, err := s.taskStore()
	if err != nil {
		s.error(w, r, err)
		return
	}
	created, err := ts.CreateTasks(r.Context(), []exactlyonce.NewTask{t})
	if err != nil {
		s.error(w, r, err)
		return
	}
	metrics.From(r.Context()).Add(metrics.EventsCreatedAsync, 1)
	if created[0].Head {
		s.asyncGroups().queueCommitted(r.Context(), []int64{created[0].ID})
	}
	writeJSON(w, http.StatusAccepted, map[string]int64{"id": created[0].ID})
}

// TaskJSON is a task as the API shows it (docs/api.md, docs/tasks.md names its fields).
type TaskJSON struct {
	ID               int64           `json:"id"`
	Kind             string          `json:"kind"`
	State            string          `json:"state"`
	URL              string          `json:"url"`
	Payload          json.RawMessage `json:"payload"`
	ReferenceID      *string         `json:"referenceId"`
	MaxRetries       int             `json:"maxRetries"`
	CreatedAt        time.Time       `json:"createdAt"`
	CompletedAt      *time.Time      `json:"completedAt"`
	IsCompleted      bool            `json:"isCompleted"`
	IsFailed         bool            `json:"isFailed"`
	ExceptionMessage *string         `json:"exceptionMessage"`
	// Attempts counts the delivery attempts made over the task's whole life: a manual retry
	// continues the count (and the numbering of GET /events/{id}/attempts).
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"nextAttemptAt"`
	ProcessedBy   string     `json:"processedBy,omitempty"`
}

func taskJSON(e exactlyonce.Event) TaskJSON {
	t := e.Task
	j := TaskJSON{ID: e.ID, Kind: string(exactlyonce.KindTask), State: exactlyonce.TaskState(e.State), URL: t.URL,
		Payload: t.Payload, MaxRetries: t.MaxRetries, CreatedAt: e.CreatedAt, IsCompleted: e.State == exactlyonce.Processed,
		IsFailed: e.State == exactlyonce.Failed, Attempts: e.Attempts, NextAttemptAt: e.NextAttemptAt, ProcessedBy: e.ProcessedBy}
	if len(j.Payload) == 0 {
		j.Payload = json.RawMessage("null")
	}
	if t.ReferenceID != "" {
		ref := t.ReferenceID
		j.ReferenceID = &ref
	}
	if j.IsCompleted {
		j.CompletedAt = e.ProcessedAt
		j.Attempts++ // the attempts column counts the failed ones
	}
	// The task's own fields say how it ended: a completed task has no exceptionMessage (the errors
	// of the attempts before are its attempts', GET /events/{id}/attempts), a failed one says why,
	// an open one why its last attempt failed. Only a task waiting its backoff has a next attempt.
	if e.LastError != "" && !j.IsCompleted {
		msg := e.LastError
		j.ExceptionMessage = &msg
	}
	if e.State != exactlyonce.Pending {
		j.NextAttemptAt = nil
	}
	return j
}

// eventID reads the {id} path value: a positive integer in canonical form (parseID).
func (s *Server) eventID(r *http.Request) (int64, error) {
	return parseID(r.PathValue("id"), "event id", "a positive integer")
}

// AttemptJSON is one delivery attempt.
type AttemptJSON struct {
	Number     int       `json:"number"`
	StartedAt  time.Time `json:"startedAt"`
	DurationMs float64   `json:"durationMs"`
	Status     *int      `json:"status"`
	Error      *string   `json:"error"`
}

// taskRequest reads the {id} of a request on a task and the task store; on an error it has
// answered, and ok is false.
func (s *Server) taskRequest(w http.ResponseWriter, r *http.Request) (id int64, ts TaskStore, ok bool) {
	id, err := s.eventID(r)
	if err == nil {
		ts, err = s.taskStore()
	}
	if err != nil {
		s.error(w, r, err)
		return 0, nil, false
	}
	return id, ts, true
}

func (s *Server) attempts(w http.ResponseWriter, r *http.Request) {
	id, ts, ok := s.taskRequest(w, r)
	if !ok {
		return
	}
	// The query before the event: a malformed parameter is the caller's mistake whatever the id
	// names, a 400 before any 404 (as on every route with an id in its path).
	after, limit, err := attemptsPage(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	e, err := s.Events.Get(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if e.Task == nil {
		s.error(w, r, exactlyonce.Errorf(exactlyonce.ENOTFOUND, "event %d is not a task: it has no delivery attempts", id))
		return
	}
	as, err := ts.AttemptsAfter(r.Context(), id, after, limit+1)
	if err != nil {
		s.error(w, r, err)
		return
	}
	// Each attempt is encoded once, to count its bytes as the answer carries them and to be written.
	out := make([]json.RawMessage, 0, min(len(as), limit))
	var next *int
	size, last := 0, 0
	for _, a := range as {
		j := AttemptJSON{Number: a.Number, StartedAt: a.Started.UTC(), DurationMs: float64(a.Duration.Microseconds()) / 1000}
		if a.Status != 0 {
			st := a.Status
			j.Status = &st
		}
		if a.Error != "" {
			msg := a.Error
			j.Error = &msg
		}
		b, err := json.Marshal(j)
		if err != nil {
			s.error(w, r, err)
			return
		}
		if len(out) == limit || (len(out) > 0 && size+carried(b) > MaxListPayloadBytes) {
			next = &last
			break
		}
		size += carried(b)
		out = append(out, b)
		last = a.Number
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "attempts": out, "next": next})
}

// attemptsPage reads the query of GET /events/{id}/attempts: after, an attempt number (0 or more;
// default 0, from the first), and limit, 1 to MaxAttemptsLimit; any other, repeated or malformed
// parameter is an EINVALID error naming it.
func attemptsPage(r *http.Request) (int, int, error) {
	q, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		return 0, 0, err
	}
	after, limit := 0, DefaultAttemptsLimit
	for _, k := range slices.Sorted(maps.Keys(q)) { // the first in name order: the same answer every time
		vs := q[k]
		switch k {
		case "after":
			if !canonicalDigits(vs[0]) {
				return 0, 0, exactlyonce.Errorf(exactlyonce.EINVALID, "after must be an attempt number (an integer of 0 or more), got %q", sanitize(vs[0]))
			}
			n, err := strconv.Atoi(vs[0])
			if err != nil || n > math.MaxInt32 { // a number too large for its type: "out of range" (docs/api.md, "Errors")
				return 0, 0, exactlyonce.Errorf(exactlyonce.EINVALID, "after %s is out of range: an attempt number is at most %d", sanitize(vs[0]), math.MaxInt32)
			}
			after = n
		case "limit":
			if limit, err = parseLimit(vs[0], MaxAttemptsLimit); err != nil {
				return 0, 0, err
			}
		default:
			return 0, 0, exactlyonce.Errorf(exactlyonce.EINVALID, "unknown query parameter %q: a task's attempts take after and limit", sanitize(k))
		}
	}
	return after, limit, nil
}

// ReferenceEventJSON is one task in a reference's listing.
type ReferenceEventJSON struct {
	ID        int64      `json:"id"`
	State     string     `json:"state"`
	Attempts  int        `json:"attempts"`
	CreatedAt time.Time  `json:"createdAt"`
	SettledAt *time.Time `json:"settledAt"`
}

func (s *Server) referenceEvents(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("referenceId")
	if err := exactlyonce.CheckPathName("referenceId", ref); err != nil {
		s.error(w, r, err)
		return
	}
	q, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		s.error(w, r, err)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if k != "after" && k != "limit" {
			s.error(w, r, exactlyonce.Errorf(exactlyonce.EINVALID, "unknown query parameter %q: the listing takes after and limit", sanitize(k)))
			return
		}
	}
	var after int64
	if v := q.Get("after"); v != "" || q.Has("after") {
		n, err := parseID(v, "after", "a task's id, a positive integer")
		if err != nil {
			s.error(w, r, err)
			return
		}
		after = n
	}
	limit := DefaultReferenceLimit
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := parseLimit(v, MaxReferenceLimit)
		if err != nil {
			s.error(w, r, err)
			return
		}
		limit = n
	}
	ts, err := s.taskStore()
	if err != nil {
		s.error(w, r, err)
		return
	}
	// more says whether the directory has a task after the page's: telling it reads no task, so a
	// page whose tasks are in the database asks S3 nothing even when the next task is archived.
	got, more, err := ts.ReferencePage(r.Context(), ref, after, limit)
	if err != nil {
		s.error(w, r, err)
		return
	}
	var next *int64
	if more && len(got) > 0 {
		id := got[len(got)-1].ID
		next = &id
	}
	out := make([]ReferenceEventJSON, len(got))
	for i, e := range got {
		out[i] = ReferenceEventJSON{ID: e.ID, State: exactlyonce.TaskState(e.State), Attempts: e.Attempts, CreatedAt: e.CreatedAt}
		if e.State.Settled() {
			out[i].SettledAt = e.ProcessedAt
			if e.State == exactlyonce.Processed {
				out[i].Attempts++
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"referenceId": ref, "events": out, "next": next})
}

func (s *Server) retry(w http.ResponseWriter, r *http.Request) {
	id, ts, ok := s.taskRequest(w, r)
	if !ok {
		return
	}
	if err := s.readRetryBody(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	if err := noKey(r); err != nil {
		s.error(w, r, err)
		return
	}
	placement, head, err := ts.RetryTask(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	state := exactlyonce.Queued // behind the open task of its reference
	if head {
		state = exactlyonce.Pending
		s.asyncGroups().queueCommitted(r.Context(), []int64{id})
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "state": exactlyonce.TaskState(state), "placement": placement})
}

// noKey refuses an Idempotency-Key on a request that does not take one: a retry (POST
// /events/{id}/retry, POST /references/{referenceId}/retry). A retry's answer is not stored, so a
// key could not make its repeat replay it; ignored, as it used to be, it let a caller believe the
// repeat safe, and a repeat sent after the task had failed again retried it again. A 400 names the
// header, before anything is written (after the body, whose own faults are named first).
func noKey(r *http.Request) error {
	if _, sent := r.Header[KeyHeader]; !sent {
		return nil
	}
	return exactlyonce.Errorf(exactlyonce.EINVALID,
		"%s is taken by the creates only: a retry is not keyed, so a key would not make it safe to repeat; "+
			"send it without one, and after an unknown outcome read the task (GET /events/{id}) before retrying again", KeyHeader)
}

// readRetryBody reads the body of a retry (POST /events/{id}/retry, POST
// /references/{referenceId}/retry) by the one rule of every body (jsonObject): none, or a JSON
// object; a retry takes no fields, so any field is refused rather than ignored.
func (s *Server) readRetryBody(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	fields, err := jsonObject(body)
	if err != nil {
		return err
	}
	for k := range fields {
		return exactlyonce.Errorf(exactlyonce.EINVALID, "unknown field %q: a retry takes no fields", sanitize(k))
	}
	return nil
}
