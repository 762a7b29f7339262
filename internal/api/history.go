package api

import (
	"context"
	"net/http"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// GET /history: how much of the history each tier holds, for the operators' console.
//
//	GET  /history   200 {"time", "total", "events": {"rows"}, "pages": {"events", "rows", "rowsEstimated"}, "archive"}
//
// "archive" is {"pages", "events"} of the history archived to S3, or null when nothing archives.

// HistoryReader is what GET /history needs (internal/mysql/eventstore implements it).
type HistoryReader interface {
	HistoryTiers(ctx context.Context) (exactlyonce.HistoryTiers, error)
}

// HistoryJSON is GET /history's answer.
type HistoryJSON struct {
	Time   time.Time `json:"time"`
	Total  int64     `json:"total"`
	Events struct {
		Rows int64 `json:"rows"`
	} `json:"events"`
	Pages struct {
		Events        int64 `json:"events"`
		Rows          int64 `json:"rows"`
		RowsEstimated bool  `json:"rowsEstimated"`
	} `json:"pages"`
	Archive *struct {
		Pages  int64 `json:"pages"`
		Events int64 `json:"events"`
	} `json:"archive"`
}

func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	if s.History == nil {
		s.error(w, r, errNoConsole)
		return
	}
	h, err := s.History.HistoryTiers(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	var out HistoryJSON
	out.Time = h.Time.UTC()
	out.Total = h.Total
	out.Events.Rows = h.EventRows
	out.Pages.Events, out.Pages.Rows, out.Pages.RowsEstimated = h.PagedEvents, h.PageRows, true
	if a := h.Archive; a != nil {
		out.Archive = &struct {
			Pages  int64 `json:"pages"`
			Events int64 `json:"events"`
		}{a.Pages, a.Events}
	}
	writeJSON(w, http.StatusOK, out)
}
