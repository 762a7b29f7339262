package api

import (
	"context"
	"maps"
	"net/http"
	"slices"

	"github.com/exactlyonce/exactlyonce"
)

// CounterReader reads the counter service's counts (internal/mysql/counterstore implements it).
// The routes below answer 404 on a Server without one.
type CounterReader interface {
	CounterSumsAfter(ctx context.Context, userID, after string, limit int) ([]exactlyonce.TypeCount, error)
	CounterSum(ctx context.Context, k exactlyonce.CounterKey) (exactlyonce.CounterSum, error)
}

// Limits of a page of a user's counts: at most MaxCounterLimit types, each named by up to 255
// characters (1,530 bytes at worst once JSON-escaped), so that a page fits in a Lambda's answer
// (6 MB) whatever the types.
const (
	DefaultCounterLimit = 1000
	MaxCounterLimit     = 1000
)

// counterReader returns the Server's counter reads, or answers 404 when it has none.
func (s *Server) counterReader(w http.ResponseWriter, r *http.Request) (CounterReader, bool) {
	if s.Counters == nil {
		s.notFound(w, r)
		return nil, false
	}
	return s.Counters, true
}

// counterText reads a path value that names a user or an entity type: a name as the counter
// consumer accepts it (exactlyonce.CheckPathName).
func counterText(r *http.Request, name string) (string, error) {
	v := r.PathValue(name)
	if err := exactlyonce.CheckPathName(name, v); err != nil {
		return "", err
	}
	return v, nil
}

// counterSums answers GET /counters/{userId}?after=<entityType>&limit=<n>: {"userId", "counters":
// {"<entityType>": {"sum", "version"}, ...}, "next"}, a page of the user's counts, the types after
// after in byte order; next is the after of the next page, null at the end. A user with no counts
// has none.
func (s *Server) counterSums(w http.ResponseWriter, r *http.Request) {
	c, ok := s.counterReader(w, r)
	if !ok {
		return
	}
	user, err := counterText(r, "userId")
	if err != nil {
		s.error(w, r, err)
		return
	}
	after, limit, err := counterPage(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	got, err := c.CounterSumsAfter(r.Context(), user, after, limit+1)
	if err != nil {
		s.error(w, r, err)
		return
	}
	var next *string
	if len(got) > limit {
		got = got[:limit]
		t := got[limit-1].EntityType
		next = &t
	}
	sums := make(map[string]exactlyonce.CounterSum, len(got))
	for _, t := range got {
		sums[t.EntityType] = t.CounterSum
	}
	writeJSON(w, http.StatusOK, struct {
		UserID   string                            `json:"userId"`
		Counters map[string]exactlyonce.CounterSum `json:"counters"`
		Next     *string                           `json:"next"`
	}{user, sums, next})
}

// counterPage reads the query of GET /counters/{userId}: after, an entity type as the counter
// service takes one, and limit, 1 to MaxCounterLimit; any other, repeated or malformed parameter
// is an EINVALID error naming it.
func counterPage(r *http.Request) (string, int, error) {
	q, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		return "", 0, err
	}
	after, limit := "", DefaultCounterLimit
	for _, k := range slices.Sorted(maps.Keys(q)) { // the first in name order: the same answer every time
		vs := q[k]
		switch k {
		case "after":
			if err := exactlyonce.CheckPathName("after", vs[0]); err != nil {
				return "", 0, err
			}
			after = vs[0]
		case "limit":
			if limit, err = parseLimit(vs[0], MaxCounterLimit); err != nil {
				return "", 0, err
			}
		default:
			return "", 0, exactlyonce.Errorf(exactlyonce.EINVALID, "unknown query parameter %q: a user's counts take after and limit", sanitize(k))
		}
	}
	return after, limit, nil
}

// counterSum answers GET /counters/{userId}/{entityType}: {"userId", "entityType", "sum",
// "version"}; an unknown count is 0 at version 0.
func (s *Server) counterSum(w http.ResponseWriter, r *http.Request) {
	c, ok := s.counterReader(w, r)
	if !ok {
		return
	}
	user, err := counterText(r, "userId")
	if err != nil {
		s.error(w, r, err)
		return
	}
	typ, err := counterText(r, "entityType")
	if err != nil {
		s.error(w, r, err)
		return
	}
	v, err := c.CounterSum(r.Context(), exactlyonce.CounterKey{EntityType: typ, UserID: user})
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		UserID     string `json:"userId"`
		EntityType string `json:"entityType"`
		exactlyonce.CounterSum
	}{user, typ, v})
}
