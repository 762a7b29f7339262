package exactlyonce

import (
	"errors"
	"fmt"
)

// Error codes. They are mapped to HTTP statuses in one place, at the edge (internal/api).
const (
	EINVALID     = "invalid"     // the caller's input is wrong
	ENOTFOUND    = "not_found"   // no such thing
	EMETHOD      = "method"      // the resource exists but not with this method
	ETOOLARGE    = "too_large"   // the request body is over the limit
	EUNAVAILABLE = "unavailable" // a dependency is down; the caller may retry
	ECONFLICT    = "conflict"    // another request holds what this one needs (its idempotency key); retry later
	ESTATE       = "state"       // what the request acts on is not in a state that allows it (a retry of a task that has not failed): final, not worth repeating
	EINTERNAL    = "internal"    // a bug or an unexpected failure
)

// Error is an error meant for a caller: its Message is safe to show. Anything that is not an *Error
// is internal, and its text must never reach a caller.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf returns an *Error with a formatted, caller-safe message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err's first *Error, or EINTERNAL.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the caller-safe message of err, never internal text.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
