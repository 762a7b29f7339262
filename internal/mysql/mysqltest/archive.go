package mysqltest

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/verify"
)

// ArchivedRows returns every event of the archive's objects (pagestore.History's second tier),
// reading every page from 0 to the id counter's from a, one GET each: for checkers and tests only.
func ArchivedRows(ctx context.Context, db *sql.DB, a pagestore.Archive) ([]pages.Row, error) {
	core, err := mysql.New(db, mysql.Config{})
	if err != nil {
		return nil, err
	}
	counter, err := core.ReadIDCounter(ctx)
	if err != nil {
		return nil, err
	}
	var out []pages.Row
	for page := int64(0); page <= pages.PageOf(counter); page++ {
		obj, ok, err := a.GetPage(ctx, page, true)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		cols, err := pages.ObjectColumns(obj, page)
		if err != nil {
			return nil, fmt.Errorf("archived page %d: %w", page, err)
		}
		for _, c := range cols {
			rows, err := pages.Decode(c)
			if err != nil {
				return nil, fmt.Errorf("archived page %d: %w", page, err)
			}
			out = append(out, rows...)
		}
	}
	return out, nil
}

// AuditArchived is AuditEvents across every tier: `events`, the page rows, then the archive's
// objects (ArchivedRows). An event in a page row and in its page's object (a page being moved) is
// one event, kept once; one twice in the database is listed twice, as AuditEvents lists it, for
// the checker to see.
func AuditArchived(ctx context.Context, db *sql.DB, a pagestore.Archive) ([]verify.Audit, error) {
	out, err := AuditEvents(ctx, db)
	if err != nil {
		return nil, err
	}
	archived, err := ArchivedRows(ctx, db, a)
	if err != nil {
		return nil, fmt.Errorf("audit the archive: %w", err)
	}
	seen := make(map[int64]bool, len(out))
	for _, x := range out {
		seen[x.ID] = true
	}
	for _, r := range archived {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		x := verify.Audit{ID: r.ID, State: eventstore.StoredState(exactlyonce.State(r.State)), HasValue: r.Value != nil}
		if r.ProcessedBy != nil {
			x.By = *r.ProcessedBy
		}
		if r.ClaimID != nil {
			x.ClaimID = *r.ClaimID
		}
		out = append(out, x)
	}
	return out, nil
}
