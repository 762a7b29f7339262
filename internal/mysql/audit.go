package mysql

import (
	"context"

	"github.com/exactlyonce/exactlyonce"
)

// Audit is one event as a checker sees it.
type Audit struct {
	ID    int64
	State exactlyonce.State
	// By is the path that settled it (api, processor, sweeper); empty while open.
	By string
	// ClaimID is the claim that holds it (while processing) or settled it; empty for events born
	// settled (POST /events) and for pending ones.
	ClaimID  string
	HasValue bool
}

// AuditEvents reads every event with what settled it, for the exactly-once checker
// (internal/verify). It scans the whole table: tests and the chaos run use it, never the product.
func (s *Store) AuditEvents(ctx context.Context) ([]Audit, error) {
	rows, err := s.db.QueryContext(ctx, query("Audit"))
	if err != nil {
		return nil, interpret("audit events", err)
	}
	defer rows.Close()
	var out []Audit
	for rows.Next() {
		var a Audit
		if err := rows.Scan(&a.ID, &a.State, &a.By, &a.ClaimID, &a.HasValue); err != nil {
			return nil, interpret("audit events", err)
		}
		a.State = storedState(a.State)
		out = append(out, a)
	}
	return out, interpret("audit events", rows.Err())
}
