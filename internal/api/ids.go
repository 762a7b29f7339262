package api

import (
	"math"
	"net/url"
	"strconv"

	"github.com/exactlyonce/exactlyonce"
)

// parseQuery reads a query string whose parameters may each be given once: a malformed one (a
// bad escape, a ';') or one given twice is an EINVALID error naming it, rather than a request read
// with the default or the first value (url.URL.Query drops what it cannot parse and keeps both).
func parseQuery(raw string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "malformed query string")
	}
	for k, vs := range q {
		if len(vs) > 1 {
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "query parameter %s given %d times: give it once", sanitize(k), len(vs))
		}
	}
	return q, nil
}

// parseID reads an id given in a path or a query (an event's {id}, the cursors before and after):
// a positive integer in canonical decimal form. One too large for an id (above 2^63-1) is "out of
// range"; anything else that is not such a number "must be" what says. name names it in the
// message ("event id", "before").
func parseID(raw, name, what string) (int64, error) {
	if canonicalDigits(raw) && raw != "0" {
		id, err := strconv.ParseInt(raw, 10, 64)
		if err == nil {
			return id, nil
		}
		return 0, exactlyonce.Errorf(exactlyonce.EINVALID, "%s %s is out of range: an id is at most %d", name, sanitize(raw), int64(math.MaxInt64))
	}
	return 0, exactlyonce.Errorf(exactlyonce.EINVALID, "%s must be %s, got %q", name, what, sanitize(raw))
}

// parseLimit reads a listing's limit: an integer from 1 to most, in canonical decimal form. A
// number outside that is "out of range", however large.
func parseLimit(raw string, most int) (int, error) {
	if canonicalDigits(raw) {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > most {
			return 0, exactlyonce.Errorf(exactlyonce.EINVALID, "limit %s is out of range: it must be from 1 to %d", sanitize(raw), most)
		}
		return n, nil
	}
	return 0, exactlyonce.Errorf(exactlyonce.EINVALID, "limit must be an integer from 1 to %d, got %q", most, sanitize(raw))
}

// canonicalDigits reports whether s is a number in canonical decimal form: digits only, and no
// leading zero but in "0" itself.
func canonicalDigits(s string) bool {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
