package mysql

// The operators' reads (issue 20): a page of the events of one state, and the overview of the
// events by state. Both are bounded by partitions that do not hold the processed history
// (sql/events.sql, ListEvents; sql/count.sql, OverviewCounts).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// EventSets are the sets of events ListEvents lists, by the names GET /events?state= takes.
var EventSets = []string{"pending", "processing", "queued", "processed", "failed"}

// listStates are the stored states of each set, written into ListEvents as literals (never caller
// text), so that the statement is pruned to their partitions when it is prepared. Processed is read
// from `fresh` and `settled` (the folded events not packed yet) and then from the packed history
// (listProcessed, pages_read.go).
var listStates = map[string]string{
	"pending":    "0",
	"processing": "1",
	"queued":     "2",
	"processed":  "10, 30",
	"failed":     "20, 40",
}

// ListEvents returns up to limit events of set (one of EventSets), newest first (by id, descending),
// with ids below before (0: from the newest), of kind kind ("" for every kind). Each event is as Get
// returns it. An unknown set is an EINVALID error. resume > 0 says that the listing stopped looking
// at resume before it found limit events (the processed history is read a bounded number of pages
// at a time): every event at or above resume is listed, and the next page starts below it.
func (s *Store) ListEvents(ctx context.Context, set string, kind exactlyonce.Kind, before int64, limit int) (events []exactlyonce.Event, resume int64, err error) {
	states, ok := listStates[set]
	if !ok {
		return nil, 0, exactlyonce.Errorf(exactlyonce.EINVALID, "state must be one of %s", strings.Join(EventSets, ", "))
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

// Overview is the events by state, exact, and the waiting metrics, as of Time (the database's clock).
type Overview struct {
	Time                                           time.Time
	Pending, Processing, Queued, Processed, Failed int64
	Total                                          int64
	Waiting                                        int64
	OldestWaiting                                  *time.Duration // nil when nothing waits
}

// Overview counts the events by state, exactly, as Count counts them: settled_count's row under a
// shared lock, then one consistent read of every partition but the processed history (`open`,
// `queued`, `fresh` and `failed`), in one READ COMMITTED transaction. The `failed` partition changes
// only with settled_count (a fold adds what it moves there; a retry of a folded failed task takes
// it off, UncountRetried), so while the lock is held the folded processed events are settled_count
// less the `failed` partition's rows. Total is the sum, what Count answers at the same moment.
//
// Waiting and OldestWaiting are the metrics' reads (sql/metrics.sql), made after the transaction:
// they describe the same moment to within a few milliseconds, not exactly.
func (s *Store) Overview(ctx context.Context) (Overview, error) {
	var o Overview
	var counted sql.NullInt64
	err := inTx(ctx, s.db, s.stats, s.retry, func(tx *sql.Tx) error {
		o = Overview{}
		if err := tx.QueryRowContext(ctx, query("LockSettledCountAt")).Scan(&counted, &o.Time); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, query("OverviewCounts"))
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
			case exactlyonce.Failed + countedShift:
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
		return Overview{}, interpret("overview", fmt.Errorf("settled_count has no row: the schema is not migrated"))
	}
	if err != nil {
		return Overview{}, interpret("overview", err)
	}
	o.Total = o.Pending + o.Processing + o.Queued + o.Processed + o.Failed
	if err := s.db.QueryRowContext(ctx, query("WaitingEvents")).Scan(&o.Waiting); err != nil {
		return Overview{}, interpret("overview: count the waiting events", err)
	}
	var us sql.NullInt64
	if err := s.db.QueryRowContext(ctx, query("OldestWaitingAge")).Scan(&us); err != nil {
		return Overview{}, interpret("overview: the oldest waiting event's age", err)
	}
	if us.Valid {
		age := time.Duration(max(us.Int64, 0)) * time.Microsecond
		o.OldestWaiting = &age
	}
	return o, nil
}
