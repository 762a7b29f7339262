package taskstore

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// The readers of a reference's packed tasks and of a packed task's attempts (pagestore): each reads
// `events` first and the pages second.

// packedLaterTasks counts the packed tasks of a reference after position pos: every one of them
// was delivered (only processed events are packed), so it has started.
func packedLaterTasks(ctx context.Context, tx *sql.Tx, ref string, pos int64) (int64, error) {
	rows, err := pagestore.OfReference(ctx, tx, ref, ReferenceHash(ref))
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
			e := eventstore.PackedEvent(r)
			e.Task = &exactlyonce.Task{ReferenceID: *r.ReferenceID, Position: *r.Position}
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b exactlyonce.Event) int { return cmp.Compare(a.Task.Position, b.Task.Position) })
	return out[:min(len(out), limit)]
}

// packedAttempts returns a packed task's attempts; ok is false when the event is not packed.
func packedAttempts(ctx context.Context, h pagestore.History, db *sql.DB, id int64) ([]exactlyonce.Attempt, bool, error) {
	r, ok, err := h.Get(ctx, db, id)
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
