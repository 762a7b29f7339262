package mysqltest

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/verify"
)

// ArchivedRows returns every event of the archive's objects (pagestore.History's second tier) that
// the database may not hold: the objects of the pages the move has passed (below high_page, read
// now: call it after reading the database's tiers), one GET each, from a; for checkers and tests
// only. A page the move never passed has every event in its rows (an object a killed move left of
// it holds copies), so it is not read: the audit of a history with nothing archived asks S3
// nothing, and works while S3 is down. (It read every page up to the id counter's: a GET each,
// 100,000 at 1,000,000,000 ids, and an error while S3 was down whatever was archived.)
func ArchivedRows(ctx context.Context, db *sql.DB, a pagestore.Archive) ([]pages.Row, error) {
	var high int64
	if err := db.QueryRowContext(ctx, queries.AuditHighPage).Scan(&high); err != nil {
		return nil, fmt.Errorf("history_archive: %w", err)
	}
	var out []pages.Row
	for page := int64(0); page < high; page++ {
		obj, ok, err := a.GetObject(ctx, page, true)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		cols, err := pages.ObjectColumns(obj.Bytes, page)
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
