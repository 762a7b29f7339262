package eventstore

// The operators' reads: a page of the events of one state, and the overview of the
// events by state. Both are bounded by partitions that do not hold the processed history
// (events.sql, ListEvents; count.sql, OverviewCounts).

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// listStates are the stored states of each set, written into ListEvents as literals (never caller
// text), so that the statement is pruned to their partitions when it is prepared. Processed is read
// from `fresh` and `settled` (the folded events not packed yet) and then from the packed history
// (listProcessed, with the packed reads of internal/mysql/pagestore).
var listStates = map[string]string{
	"pending":    "0",
	"processing": "1",
	"queued":     "2",
	"processed":  "10, 30",
	"failed":     "20, 40",
}

// ListEvents returns up to limit events of set (one of exactlyonce.EventSets), newest first (by id, descending),
// with ids below before (0: from the newest), of kind kind ("" for every kind). Each event is as Get
// returns it. An unknown set is an EINVALID error. resume > 0 says that the listing stopped looking
// at resume before it found limit events (the processed history is read a bounded number of pages
// at a time, and a page of archived history is read only when an event it may hold is needed: the
// processed listing stops before one once it has limit-1 events, limit being the caller's page
// plus the one that says more follow): every event at or above resume is listed, and the next page
// starts below it.
func (s *Store) ListEvents(ctx context.Context, set string, kind exactlyonce.Kind, before int64, limit int) (events []exactlyonce.Event, resume int64, err error) {
	states, ok := listStates[set]
	if !ok {
		return nil, 0, exactlyonce.Errorf(exactlyonce.EINVALID, "state must be one of %s", strings.Join(exactlyonce.EventSets, ", "))
	}
	if set == "processed" {
		return s.listProcessed(ctx, kind, before, limit)
	}
	if before <= 0 {
		before = math.MaxInt64
	}
	events, err = s.listStates(ctx, states, kind, before, limit)
	return events, 0, err
}

// Overview counts the events by state, exactly, as Count counts them: settled_count's row under a
// shared lock, then one consistent read of every partition but the processed history (`open`,
// `queued`, `fresh` and `failed`), in one READ COMMITTED transaction. The `failed` partition changes
// only with settled_count (a fold adds what it moves there; a retry of a folded failed task takes
// it off, UncountRetried), so while the lock is held the folded processed events are settled_count
// less the `failed` partition's rows. Total is the sum, what Count answers at the same moment.
//
// Waiting and OldestWaiting are the metrics' reads (metrics.sql), made after the transaction:
// they describe the same moment to within a few milliseconds, not exactly.
func (s *Store) Overview(ctx context.Context) (exactlyonce.Overview, error) {
	var o exactlyonce.Overview
	var counted sql.NullInt64
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		o = exactlyonce.Overview{}
		if err := tx.QueryRowContext(ctx, queries.LockSettledCountAt).Scan(&counted, &o.Time); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, queries.OverviewCounts)
		if err != nil {
			return err
		}
		defer rows.Close()
		var foldedFailed int64
		for rows.Next() {
			var state exactlyonce.State
			var n int64
			if err := rows.Scan(&state, &n); err != nil {
				return err
			}
			switch state {
			case exactlyonce.Pending:
				o.Pending += n
			case exactlyonce.Processing:
				o.Processing += n
			case exactlyonce.Queued:
				o.Queued += n
			case exactlyonce.Processed:
				o.Processed += n
			case exactlyonce.Failed:
				o.Failed += n
			case exactlyonce.Failed + CountedShift:
				foldedFailed += n
			default:
				return fmt.Errorf("overview: %d events in the unknown state %d", n, state)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		o.Processed += counted.Int64 - foldedFailed
		o.Failed += foldedFailed
		return nil
	})
	if errors.Is(err, sql.ErrNoRows) {
		return exactlyonce.Overview{}, mysql.Interpret("overview", fmt.Errorf("settled_count has no row: the schema is not migrated"))
	}
	if err != nil {
		return exactlyonce.Overview{}, mysql.Interpret("overview", err)
	}
	o.Total = o.Pending + o.Processing + o.Queued + o.Processed + o.Failed
	if err := s.db.QueryRowContext(ctx, queries.WaitingEvents).Scan(&o.Waiting); err != nil {
		return exactlyonce.Overview{}, mysql.Interpret("overview: count the waiting events", err)
	}
	var us sql.NullInt64
	if err := s.db.QueryRowContext(ctx, queries.OldestWaitingAge).Scan(&us); err != nil {
		return exactlyonce.Overview{}, mysql.Interpret("overview: the oldest waiting event's age", err)
	}
	if us.Valid {
		age := time.Duration(max(us.Int64, 0)) * time.Microsecond
		o.OldestWaiting = &age
	}
	return o, nil
}

// listWalkColumns is the most columns (a hundred ids each, twenty units) one page of the processed
// listing reads: about 20 ms at most. A listing that has not found its events by then (a long gap,
// or a kind that is rare) answers what it found with a cursor below the columns it read.
const listWalkColumns = 20 * pages.UnitColumns

// listProcessed is ListEvents of the processed events: those in `events` (settled since the last
// fold, or folded and not packed yet: `fresh` and `settled`, bounded by the pack) merged with those
// in the pages, read down from the cursor's column a span of columns at a time. It returns resume > 0 when it
// stopped walking at resume before it found limit events: the events it returns are all of those at
// or above resume, and the next page starts below it. It stops so at the walk's bound, and before
// a page the move has passed once it has limit-1 events (at least one), so that a page whose
// events are all in the database asks S3 nothing.
func (s *Store) listProcessed(ctx context.Context, kind exactlyonce.Kind, before int64, limit int) ([]exactlyonce.Event, int64, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	if before == 1 {
		// Ids start at 1 (the id counter hands out its value plus one): nothing is below it, in any
		// tier. Without this, the walk read column 0 of page 0, whose object a move may hold: a 503
		// while S3 was down, for an answer that is always empty.
		return []exactlyonce.Event{}, 0, nil
	}
	recent, err := s.listStates(ctx, "10, 30", kind, before, limit)
	if err != nil {
		return nil, 0, err
	}
	counter, err := s.core.ReadIDCounter(ctx)
	if err != nil {
		return nil, 0, mysql.Interpret("list events", err)
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
	var objs pagestore.PageObjects // each archived page's object once a request, not once a span
	covered := 0                   // events found at or above the last span's first id: complete down to there
	for walked := int64(0); next >= 0 && walked < listWalkColumns; {
		if walked > 0 && covered >= max(limit-1, 1) && !objs.Holds(next/pages.Columns) {
			// Every event but the last is found: the last only tells the API whether more follow
			// (it asks for one more than it shows). That is not worth a GET of an archived page, nor
			// a 503 while S3 is down: stop before such a page, with the cursor at its top (resume).
			// (A page whose object an earlier span read costs nothing more.)
			passed, err := s.history.Passed(ctx, s.db, next/pages.Columns)
			if err != nil {
				return nil, 0, mysql.Interpret("list events", err)
			}
			if passed {
				break
			}
		}
		n := min(span, next%pages.Columns+1, listWalkColumns-walked)
		first := next - n + 1
		rows, err := s.history.ReadColumnsOnce(ctx, s.db, first/pages.Columns, int(first%pages.Columns), int(n), &objs)
		if err != nil {
			return nil, 0, mysql.Interpret("list events", err)
		}
		for _, r := range rows {
			if r.ID < before && !seen[r.ID] && (kind == "" || r.Kind == string(kind)) {
				seen[r.ID] = true
				out = append(out, PackedEvent(r))
			}
		}
		lowest, next, walked, span = first, first-1, walked+n, pages.UnitColumns
		covered = 0
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

// listStates is one page of the events of a set of stored states (ListEvents).
func (s *Store) listStates(ctx context.Context, states string, kind exactlyonce.Kind, before int64, limit int) ([]exactlyonce.Event, error) {
	q := strings.Replace(queries.ListEvents, "/*states*/", states, 1)
	rows, err := s.db.QueryContext(ctx, q, before, string(kind), string(kind), limit)
	if err != nil {
		return nil, mysql.Interpret("list events", err)
	}
	defer rows.Close()
	out := []exactlyonce.Event{}
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, mysql.Interpret("list events", err)
		}
		out = append(out, e)
	}
	return out, mysql.Interpret("list events", rows.Err())
}
