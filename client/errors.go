package client

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The kinds of the API's errors, for errors.Is: an *Error is the one of its status.
var (
	// ErrInvalid: the request was refused as it is (400); *Error.Field names the field or
	// parameter when the API's message does.
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: no such event, task, event worker or route (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: a task's retry of a task that has not failed, or a create whose key was still in
	// flight after the retries (409).
	ErrConflict = errors.New("conflict")
	// ErrKeyReused: the Idempotency-Key was used with another request (422); nothing was written.
	ErrKeyReused = errors.New("idempotency key reused with another request")
	// ErrUnavailable: the API or its database could not serve the request, after the retries (429,
	// 502, 503, 504, or no answer at all: a *ConnectionError).
	ErrUnavailable = errors.New("unavailable")
)

// Error is an answer of the API that is not a success.
type Error struct {
	// Status is the HTTP status; Message the API's {"error"}, which names the problem.
	Status  int
	Message string
	// Field is the request's field or parameter the message names, when it names one of them
	// (url, payload, referenceId, maxRetries, state, kind, before, after, limit, active, id,
	// userId, entityType, Idempotency-Key).
	Field string
	// RetryAfter is the answer's Retry-After (429, 503, 409), 0 if none.
	RetryAfter time.Duration
	// IdempotencyKey is the key a create carried (the caller's, or the one the client generated),
	// "" on other calls: a create that failed may still have been stored, and called again with
	// WithIdempotencyKey(IdempotencyKey) it is the same create, never a second one.
	IdempotencyKey string
	// Local is true when the client refused the request itself, before sending anything, with
	// the status and message the API gives such a request (an empty Idempotency-Key, a user id a
	// path cannot carry).
	Local bool
}

// refused is the client's own 400 for a request it does not send, naming field.
func refused(field, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Message: msg, Field: field, Local: true}
}

func (e *Error) Error() string {
	who := "exactlyonce API"
	if e.Local {
		who = "exactlyonce client, not sent"
	}
	return fmt.Sprintf("%s: %d %s: %s", who, e.Status, http.StatusText(e.Status), e.Message)
}

// Is makes errors.Is(err, ErrNotFound) and the others true for the statuses they stand for.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrInvalid:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrKeyReused:
		return e.Status == http.StatusUnprocessableEntity
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests ||
			e.Status == http.StatusBadGateway || e.Status == http.StatusGatewayTimeout
	}
	return false
}

// ConnectionError is a call whose last attempt got no answer: the connection was refused, cut or
// timed out. A create may still have been stored; with its key, calling it again is safe. A task's
// or reference's retry may have been done too: it is returned after its first such attempt.
type ConnectionError struct {
	Err error
	// IdempotencyKey is the create's key, "" on other calls (see Error.IdempotencyKey).
	IdempotencyKey string
}

func (e *ConnectionError) Error() string { return "exactlyonce API: no answer: " + e.Err.Error() }
func (e *ConnectionError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *ConnectionError) Is(target error) bool { return target == ErrUnavailable }

// fields are the names the API's messages start with when they are about one field or parameter.
var fields = []string{"url", "payload", "referenceId", "maxRetries", "state", "kind", "before", "after", "limit",
	"active", "userId", "entityType", "Idempotency-Key"}

func newError(resp *response) *Error {
	e := &Error{Status: resp.status, RetryAfter: parseRetryAfter(resp.header.Get("Retry-After"))}
	var body struct {
		Error   string `json:"error"`
		Message string `json:"message"` // API Gateway's own answers (403, 429, 502, 504)
	}
	if json.Unmarshal(resp.body, &body) == nil && (body.Error != "" || body.Message != "") {
		e.Message = cmp.Or(body.Error, body.Message)
	} else {
		e.Message = strings.TrimSpace(string(resp.body))
	}
	if resp.status >= 300 && resp.status < 400 {
		e.Message = fmt.Sprintf("the API answered a redirect to %q, which the client does not follow: check the base URL (an http:// url where the API is https://?)",
			resp.header.Get("Location"))
	}
	e.Field = fieldOf(e.Message)
	return e
}

// fieldOf is the field a message is about: its first word, when that is a field's name
// ("url: ...", "maxRetries must be ..."; "payload.items[2]: ..." is about payload), or the one an
// unknown-field message quotes.
func fieldOf(msg string) string {
	if rest, ok := strings.CutPrefix(msg, `unknown field "`); ok {
		if name, _, ok := strings.Cut(rest, `"`); ok {
			return name
		}
	}
	if strings.HasPrefix(msg, "event id ") {
		return "id"
	}
	word := msg
	if i := strings.IndexAny(msg, " :.["); i >= 0 {
		word = msg[:i]
	}
	for _, f := range fields {
		if word == f {
			return f
		}
	}
	return ""
}
