package verify

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// WorkerBooks checks the event workers' registry (event_workers) against the task rows, as an
// auditor would: the open tasks of a reference are in one event worker at most; every task of a worker names
// a reference the worker holds; a worker's tasksCompleted, tasksFailed and tasksRemaining are
// exactly its completed, failed and open tasks; its lastCompletedTask is one of its completed tasks,
// and none of them completed after it. A settled task names a worker. It reads the whole tables:
// for tests. packed reads the tasks with a reference of the packed history (mysqltest.PackedTasks):
// it is read after the events table, so that a task packed meanwhile is seen once.
func WorkerBooks(ctx context.Context, db *sql.DB, packed PackedTasks) error {
	type worker struct {
		remaining, completed, failed int64
		last                         sql.NullInt64
		refs                         []string
	}
	workers := map[string]*worker{}
	rows, err := db.QueryContext(ctx, `SELECT worker_id, tasks_remaining, tasks_completed, tasks_failed, last_completed_task, reference_ids FROM event_workers`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id, refs string
		w := &worker{}
		if err := rows.Scan(&id, &w.remaining, &w.completed, &w.failed, &w.last, &refs); err != nil {
			rows.Close()
			return err
		}
		if err := json.Unmarshal([]byte(refs), &w.refs); err != nil {
			rows.Close()
			return err
		}
		workers[id] = w
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	type books struct {
		completed, failed, open int64
		at                      map[int64]time.Time
	}
	got := map[string]*books{}
	openBy := map[string]map[string]bool{} // reference: the workers holding an open task of it
	tasks, err := taskRows(ctx, db, packed)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		id, state, ref, wid, at := t.ID, t.State, t.ReferenceID, t.WorkerID, t.ProcessedAt
		if wid == "" {
			if state != 0 && state != 2 {
				return fmt.Errorf("task %d (state %d) has no event worker", id, state)
			}
			continue
		}
		w, ok := workers[wid]
		if !ok {
			return fmt.Errorf("task %d names event worker %s, which is not in the registry", id, wid)
		}
		held := false
		for _, r := range w.refs {
			held = held || r == ref
		}
		if !held {
			return fmt.Errorf("task %d of reference %s names event worker %s, which does not hold it", id, ref, wid)
		}
		b := got[wid]
		if b == nil {
			b = &books{at: map[int64]time.Time{}}
			got[wid] = b
		}
		switch state {
		case 10, 30:
			b.completed++
			b.at[id] = at.Time
		case 20, 40:
			b.failed++
		default:
			b.open++
			if openBy[ref] == nil {
				openBy[ref] = map[string]bool{}
			}
			openBy[ref][wid] = true
		}
	}
	// A reference moves to another worker only when its worker holds no open task of it (a new task
	// heads it): at any time one worker at most holds its open tasks.
	for ref, ws := range openBy {
		if len(ws) > 1 {
			return fmt.Errorf("reference %s has open tasks in %d event workers", ref, len(ws))
		}
	}
	for id, w := range workers {
		b := got[id]
		if b == nil {
			b = &books{}
		}
		if b.completed != w.completed || b.failed != w.failed || b.open != w.remaining {
			return fmt.Errorf("event worker %s: books completed %d failed %d remaining %d, task rows %d, %d, %d",
				id, w.completed, w.failed, w.remaining, b.completed, b.failed, b.open)
		}
		if b.completed == 0 {
			continue
		}
		if !w.last.Valid {
			return fmt.Errorf("event worker %s completed %d tasks and has no last completed task", id, b.completed)
		}
		at, ok := b.at[w.last.Int64]
		if !ok {
			return fmt.Errorf("event worker %s: last completed task %d is not one of its completed tasks", id, w.last.Int64)
		}
		for tid, other := range b.at {
			if other.After(at) {
				return fmt.Errorf("event worker %s: task %d completed after its last completed task %d", id, tid, w.last.Int64)
			}
		}
	}
	return nil
}

// TaskRow is a task with a reference as the books' check sees it.
type TaskRow struct {
	ID          int64
	State       int // as stored: 30 and 40 once folded
	ReferenceID string
	WorkerID    string
	ProcessedAt sql.NullTime
}

// PackedTasks reads the tasks with a reference in the packed history.
type PackedTasks func(ctx context.Context, db *sql.DB) ([]TaskRow, error)

// taskRows are the tasks with a reference: those in `events`, then the packed ones, each once.
func taskRows(ctx context.Context, db *sql.DB, readPacked PackedTasks) ([]TaskRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, state, reference_id, COALESCE(worker_id, ''), processed_at FROM events WHERE kind = 'task' AND reference_id IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TaskRow
	seen := map[int64]bool{}
	for rows.Next() {
		var t TaskRow
		if err := rows.Scan(&t.ID, &t.State, &t.ReferenceID, &t.WorkerID, &t.ProcessedAt); err != nil {
			return nil, err
		}
		seen[t.ID] = true
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	packed, err := readPacked(ctx, db)
	if err != nil {
		return nil, err
	}
	for _, t := range packed {
		if !seen[t.ID] {
			out = append(out, t)
		}
	}
	return out, nil
}
