package mysql

// The readers of settled events that also read the packed history (pages.go): the processed
// listing, a reference's listing and its retry's question, a task's attempts, and the checkers'
// audit. Every one reads `events` first and the pages second: a pack moves events from one to the
// other in one transaction, so an event missed by the first read is in the second, and one seen in
// both (packed in between) is kept once.

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// listWalkColumns is the most columns (a hundred ids each, twenty units) one page of the processed
// listing reads: about 20 ms at most. A listing that has not found its events by then (a long gap,
// or a kind that is rare) answers what it found with a cursor below the columns it read.
const listWalkColumns = 20 * pages.UnitColumns

// listProcessed is ListEvents of the processed events: those in `events` (settled since the last
// fold, or folded and not packed yet: `fresh` and `settled`, bounded by the pack) merged with those
// in the pages, read down from the cursor's column a span of columns at a time. It returns resume > 0 when it
// stopped walking at resume before it found limit events: the events it returns are all of those at
// or above resume, and the next page starts below it.
func (s *Store) listProcessed(ctx context.Context, kind exactlyonce.Kind, before int64, limit int) ([]exactlyonce.Event, int64, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	recent, err := s.listStates(ctx, "10, 30", kind, before, limit)
	if err != nil {
		return nil, 0, err
	}
	var counter int64
	if err := s.db.QueryRowContext(ctx, query("ReadCounter")).Scan(&counter); err != nil {
		return nil, 0, interpret("list events", err)
	}
	seen := make(map[int64]bool, len(recent))
	for _, e := range recent {
		seen[e.ID] = true
	}
	out := recent
	// The walk reads spans of columns of one page row, down from the column that holds the cursor:
	// first as many as limit needs (a column holds at most PerColumn events), then a unit's worth at
	// a time; never past the first column of the page, which ends a span.
	next := min(before-1, counter) / pages.PerColumn // the next column to read, as id / PerColumn
	lowest := next + 1
	span := int64((limit+pages.PerColumn-1)/pages.PerColumn + 1)
	for walked := int64(0); next >= 0 && walked < listWalkColumns; {
		n := min(span, next%pages.Columns+1, listWalkColumns-walked)
		first := next - n + 1
		q := pagesQuery("UnitRows", columnList(int(first%pages.Columns), int(n)))
		rows, err := decodePageRows(s.db.QueryContext(ctx, q, first/pages.Columns))
		if err != nil {
			return nil, 0, interpret("list events", err)
		}
		for _, r := range rows {
			if r.ID < before && !seen[r.ID] && (kind == "" || r.Kind == string(kind)) {
				seen[r.ID] = true
				out = append(out, packedEvent(r))
			}
		}
		lowest, next, walked, span = first, first-1, walked+n, pages.UnitColumns
		covered := 0 // events found at or above this span's first id: complete down to there
		for _, e := range out {
			if e.ID >= first*pages.PerColumn {
				covered++
			}
		}
		if covered >= limit {
			break
		}
	}
	slices.SortFunc(out, func(a, b exactlyonce.Event) int { return cmp.Compare(b.ID, a.ID) })
	var resume int64
	if lowest > 0 {
		// Below the columns walked, `events` may have events that columns not read yet come before.
		floor := lowest * pages.PerColumn
		out = slices.DeleteFunc(out, func(e exactlyonce.Event) bool { return e.ID < floor })
		if len(out) < limit {
			resume = floor
		}
	}
	return out[:min(len(out), limit)], resume, nil
}

// referenceQuery is PagesOfReference with its column lists written.
var referenceQuery = func() string {
	found := make([]string, pages.Columns)
	match := make([]string, pages.Columns)
	for c := range found {
		found[c] = fmt.Sprintf("IF(INSTR(c%d, q.r) > 0, c%d, NULL)", c, c)
		match[c] = fmt.Sprintf("INSTR(c%d, q.r) > 0", c)
	}
	q := strings.Replace(query("PagesOfReference"), "/*found*/", strings.Join(found, ", "), 1)
	return strings.Replace(q, "/*any*/", strings.Join(match, " OR "), 1)
}()

// packedOfReference returns the packed tasks of a reference (PagesOfReference: a scan of the
// packed history), in position order.
func packedOfReference(ctx context.Context, q txConn, ref string) ([]pages.Row, error) {
	hash := ReferenceHash(ref)
	rows, err := decodePageRows(q.QueryContext(ctx, referenceQuery, pages.ReferenceNeedle(ref, hash)))
	if err != nil {
		return nil, err
	}
	rows = slices.DeleteFunc(rows, func(r pages.Row) bool {
		return r.Kind != string(exactlyonce.KindTask) || r.ReferenceID == nil || *r.ReferenceID != ref ||
			r.RoutingHash != hash || r.Position == nil
	})
	slices.SortFunc(rows, func(a, b pages.Row) int { return cmp.Compare(*a.Position, *b.Position) })
	return rows, nil
}

// packedLaterTasks counts the packed tasks of a reference after position pos: every one of them
// was delivered (only processed events are packed), so it has started.
func packedLaterTasks(ctx context.Context, tx *sql.Tx, ref string, pos int64) (int64, error) {
	rows, err := packedOfReference(ctx, tx, ref)
	var n int64
	for _, r := range rows {
		if *r.Position > pos {
			n++
		}
	}
	return n, err
}

// mergeReferenceTasks merges a reference's packed tasks into the tasks `events` answered, in
// position order after from, at most limit.
func mergeReferenceTasks(out []exactlyonce.Event, packed []pages.Row, from int64, limit int) []exactlyonce.Event {
	seen := map[int64]bool{}
	for _, e := range out {
		seen[e.ID] = true
	}
	for _, r := range packed {
		if *r.Position > from && !seen[r.ID] {
			e := packedEvent(r)
			e.Task = &exactlyonce.Task{ReferenceID: *r.ReferenceID, Position: *r.Position}
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b exactlyonce.Event) int { return cmp.Compare(a.Task.Position, b.Task.Position) })
	return out[:min(len(out), limit)]
}

// packedAttempts returns a packed task's attempts; ok is false when the event is not packed.
func packedAttempts(ctx context.Context, db *sql.DB, id int64) ([]exactlyonce.Attempt, bool, error) {
	r, ok, err := getPacked(ctx, db, id)
	if err != nil || !ok {
		return nil, ok, err
	}
	out := make([]exactlyonce.Attempt, 0, len(r.TaskAttempts))
	for _, a := range r.TaskAttempts {
		e := ""
		if a.Error != nil {
			e = *a.Error
		}
		out = append(out, exactlyonce.Attempt{Number: int(a.Number), Started: a.StartedAt,
			Duration: time.Duration(a.DurationUS) * time.Microsecond, Status: int(a.Status), Error: e})
	}
	return out, true, nil
}

// auditPages is AuditEvents of the packed history.
func (s *Store) auditPages(ctx context.Context) ([]Audit, error) {
	rows, err := decodePageRows(s.db.QueryContext(ctx, pagesQuery("AuditPages", allColumns)))
	if err != nil {
		return nil, err
	}
	out := make([]Audit, 0, len(rows))
	for _, r := range rows {
		a := Audit{ID: r.ID, State: storedState(exactlyonce.State(r.State)), HasValue: r.Value != nil}
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

// listStates is one page of the events of a set of stored states (ListEvents).
func (s *Store) listStates(ctx context.Context, states string, kind exactlyonce.Kind, before int64, limit int) ([]exactlyonce.Event, error) {
	q := strings.Replace(query("ListEvents"), "/*states*/", states, 1)
	rows, err := s.db.QueryContext(ctx, q, before, string(kind), string(kind), limit)
	if err != nil {
		return nil, interpret("list events", err)
	}
	defer rows.Close()
	out := []exactlyonce.Event{}
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, interpret("list events", err)
		}
		out = append(out, e)
	}
	return out, interpret("list events", rows.Err())
}

// TaskRow is a task with a reference as a checker sees it (verify.WorkerBooks).
type TaskRow struct {
	ID          int64
	State       int // as stored: 30 and 40 once folded
	ReferenceID string
	WorkerID    string
	ProcessedAt sql.NullTime
}

// PackedTasks returns the tasks with a reference in the packed history. It reads every page row:
// for checkers only.
func PackedTasks(ctx context.Context, db *sql.DB) ([]TaskRow, error) {
	rows, err := decodePageRows(db.QueryContext(ctx, pagesQuery("AuditPages", allColumns)))
	if err != nil {
		return nil, err
	}
	var out []TaskRow
	for _, r := range rows {
		if r.Kind != string(exactlyonce.KindTask) || r.ReferenceID == nil {
			continue
		}
		t := TaskRow{ID: r.ID, State: r.State, ReferenceID: *r.ReferenceID}
		if r.WorkerID != nil {
			t.WorkerID = *r.WorkerID
		}
		if r.ProcessedAt != nil {
			t.ProcessedAt = sql.NullTime{Time: *r.ProcessedAt, Valid: true}
		}
		out = append(out, t)
	}
	return out, nil
}
