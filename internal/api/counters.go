package api

import (
	"context"
	"net/http"

	"github.com/exactlyonce/exactlyonce"
)

// CounterReader reads the counter service's counts (internal/mysql/counterstore implements it).
// The routes below answer 404 on a Server without one.
type CounterReader interface {
	CounterSums(ctx context.Context, userID string) (map[string]exactlyonce.CounterSum, error)
	CounterSum(ctx context.Context, k exactlyonce.CounterKey) (exactlyonce.CounterSum, error)
}

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

// counterSums answers GET /counters/{userId}: {"userId", "counters": {"<entityType>": {"sum",
// "version"}, ...}}; a user with no counts has none.
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
	sums, err := c.CounterSums(r.Context(), user)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		UserID   string                            `json:"userId"`
		Counters map[string]exactlyonce.CounterSum `json:"counters"`
	}{user, sums})
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
