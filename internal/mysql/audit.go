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
	if err := rows.Err(); err != nil {
		return nil, interpret("audit events", err)
	}
	// Then the packed history. An event packed between the two reads is in both: it is kept once.
	// One packed twice would be listed twice, for the checker to see.
	packed, err := s.auditPages(ctx)
	if err != nil {
		return nil, interpret("audit events", err)
	}
	inEvents := make(map[int64]bool, len(out))
	for _, a := range out {
		inEvents[a.ID] = true
	}
	for _, a := range packed {
		if !inEvents[a.ID] {
			out = append(out, a)
		}
	}
	return out, nil
}
