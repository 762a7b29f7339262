package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
	"github.com/exactlyonce/exactlyonce/internal/verify"
)

// allColumns is every column of a page row, c0 .. c99.
var allColumns = func() string {
	names := make([]string, pages.Columns)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	return strings.Join(names, ", ")
}()

// AuditEvents reads every event with what settled it, for the exactly-once checker
// (internal/verify): those in `events`, then those of the packed history. It scans every table:
// tests, the chaos run and the benchmark use it, never the product.
func AuditEvents(ctx context.Context, db *sql.DB) ([]verify.Audit, error) {
	rows, err := db.QueryContext(ctx, queries.Audit)
	if err != nil {
		return nil, mysql.Interpret("audit events", err)
	}
	defer rows.Close()
	var out []verify.Audit
	for rows.Next() {
		var a verify.Audit
		if err := rows.Scan(&a.ID, &a.State, &a.By, &a.ClaimID, &a.HasValue); err != nil {
			return nil, mysql.Interpret("audit events", err)
		}
		a.State = eventstore.StoredState(a.State)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, mysql.Interpret("audit events", err)
	}
	// Then the packed history. An event packed between the two reads is in both: it is kept once.
	// One packed twice would be listed twice, for the checker to see.
	packed, err := auditPages(ctx, db)
	if err != nil {
		return nil, mysql.Interpret("audit events", err)
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

// readAllPages reads and decodes every page row (AuditPages).
func readAllPages(ctx context.Context, db *sql.DB) ([]pages.Row, error) {
	return pagestore.DecodeRows(db.QueryContext(ctx, strings.Replace(queries.AuditPages, "/*columns*/", allColumns, 1)))
}

// auditPages is AuditEvents of the packed history.
func auditPages(ctx context.Context, db *sql.DB) ([]verify.Audit, error) {
	rows, err := readAllPages(ctx, db)
	if err != nil {
		return nil, err
	}
	out := make([]verify.Audit, 0, len(rows))
	for _, r := range rows {
		a := verify.Audit{ID: r.ID, State: eventstore.StoredState(exactlyonce.State(r.State)), HasValue: r.Value != nil}
		if r.ProcessedBy != nil {
			a.By = *r.ProcessedBy
		}
		if r.ClaimID != nil {
			a.ClaimID = *r.ClaimID
		}
		out = append(out, a)
	}
	return out, nil
}

// PackedTasks returns the tasks with a reference in the packed history (verify.WorkerBooks reads
// them after those of `events`). It reads every page row: for checkers only.
func PackedTasks(ctx context.Context, db *sql.DB) ([]verify.TaskRow, error) {
	rows, err := readAllPages(ctx, db)
	if err != nil {
		return nil, err
	}
	return taskRows(rows), nil
}

// ArchivedTasks is PackedTasks across both tiers of the packed history: every page row, then every
// object of the archive a (ArchivedRows), a task in both (its page moving) once.
func ArchivedTasks(a pagestore.Archive) verify.PackedTasks {
	return func(ctx context.Context, db *sql.DB) ([]verify.TaskRow, error) {
		rows, err := readAllPages(ctx, db)
		if err != nil {
			return nil, err
		}
		archived, err := ArchivedRows(ctx, db, a)
		if err != nil {
			return nil, err
		}
		seen := make(map[int64]bool, len(rows))
		for _, r := range rows {
			seen[r.ID] = true
		}
		for _, r := range archived {
			if !seen[r.ID] {
				seen[r.ID] = true
				rows = append(rows, r)
			}
		}
		return taskRows(rows), nil
	}
}

// taskRows are the tasks with a reference among packed rows.
func taskRows(rows []pages.Row) []verify.TaskRow {
	var out []verify.TaskRow
	for _, r := range rows {
		if r.Kind != string(exactlyonce.KindTask) || r.ReferenceID == nil {
			continue
		}
		t := verify.TaskRow{ID: r.ID, State: r.State, ReferenceID: *r.ReferenceID}
		if r.WorkerID != nil {
			t.WorkerID = *r.WorkerID
		}
		if r.ProcessedAt != nil {
			t.ProcessedAt = sql.NullTime{Time: *r.ProcessedAt, Valid: true}
		}
		out = append(out, t)
	}
	return out
}

// PageRowCounts returns the page rows of event_pages and the events they hold, exactly (a scan of
// every page row: tests and the benchmark, where GET /history's estimate of the rows is not enough).
func PageRowCounts(ctx context.Context, db *sql.DB) (rows, events int64, err error) {
	err = db.QueryRowContext(ctx, queries.PageRowCounts).Scan(&rows, &events)
	return rows, events, err
}
