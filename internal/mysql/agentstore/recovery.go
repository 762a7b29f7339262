package agentstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// recoveryTexts are the statements of recovery.sql.
type recoveryTexts struct {
	OrphanWorkers, AdoptedWorker, LiveWorkerIDs, ActiveWorkerSizes, DoneWorkerSizes, WorkersByID string
}

// idBatch bounds the ids one statement names (LiveWorkers, WorkersPage).
const idBatch = 500

// OrphanWorkers lists up to limit live event workers whose agent is neither agent nor one of live
// and whose first reference's hash is in r, oldest first: each with its ID and AgentID only (its
// references are read once it is adopted, AdoptedWorker).
func (s *Store) OrphanWorkers(ctx context.Context, agent int64, live []int64, r exactlyonce.HashRange, limit int) ([]exactlyonce.EventWorker, error) {
	args := []any{agent}
	for _, id := range live {
		args = append(args, id)
	}
	q := strings.Replace(recoveryQueries.OrphanWorkers, "/*live*/", mysql.Placeholders(len(args)), 1)
	args = append(args, r.Lo, r.Hi, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mysql.Interpret("list orphaned event workers", err)
	}
	defer rows.Close()
	var out []exactlyonce.EventWorker
	for rows.Next() {
		var w exactlyonce.EventWorker
		if err := rows.Scan(&w.ID, &w.AgentID); err != nil {
			return nil, mysql.Interpret("list orphaned event workers", err)
		}
		out = append(out, w)
	}
	return out, mysql.Interpret("list orphaned event workers", rows.Err())
}

// AdoptedWorker reads the references and willTerminate of live worker id if agent runs it; false
// if it is done or another's.
func (s *Store) AdoptedWorker(ctx context.Context, id string, agent int64) (exactlyonce.EventWorker, bool, error) {
	var refs string
	w := exactlyonce.EventWorker{ID: id, AgentID: agent}
	err := s.db.QueryRowContext(ctx, recoveryQueries.AdoptedWorker, id, agent).Scan(&refs, &w.WillTerminate)
	if errors.Is(err, sql.ErrNoRows) {
		return w, false, nil
	}
	if err != nil {
		return w, false, mysql.Interpret("read an adopted event worker", err)
	}
	if err := json.Unmarshal([]byte(refs), &w.References); err != nil {
		return w, false, fmt.Errorf("event worker %s: references: %w", id, err)
	}
	return w, true, nil
}

// LiveWorkers returns which of ids are live (not done) event workers, idBatch ids a statement.
func (s *Store) LiveWorkers(ctx context.Context, ids []string) (map[string]bool, error) {
	live := map[string]bool{}
	for len(ids) > 0 {
		n := min(len(ids), idBatch)
		q, args := expandStrings(recoveryQueries.LiveWorkerIDs, ids[:n])
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err := scanIDsInto(live, rows, err); err != nil {
			return nil, mysql.Interpret("read live event workers", err)
		}
		ids = ids[n:]
	}
	return live, nil
}

// The cursor bounds of a first page: before every live worker's created_at, after every done
// worker's done_at.
var (
	firstCreated = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	firstDone    = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// WorkersPage reads a page of the live event workers (done false: oldest first) or of the done
// ones (done true: the most recently done first) after cursor after (the zero cursor: from the
// first): at most rows workers, and of those only as many as fit, their references counted as the
// database holds them, in bytes (at least one). It returns them, the cursor after the last one
// and whether more may follow. A worker that became done meanwhile is left out of the live page.
func (s *Store) WorkersPage(ctx context.Context, done bool, after exactlyonce.WorkerCursor, rows, bytes int) ([]exactlyonce.EventWorker, exactlyonce.WorkerCursor, bool, error) {
	q, at := recoveryQueries.ActiveWorkerSizes, cmpTime(after.At, firstCreated)
	if done {
		q, at = recoveryQueries.DoneWorkerSizes, cmpTime(after.At, firstDone)
	}
	rows = max(1, min(rows, idBatch))
	type size struct {
		id  string
		at  time.Time
		len int64
	}
	var sizes []size
	r, err := s.db.QueryContext(ctx, q, at, at, after.ID, rows)
	if err != nil {
		return nil, after, false, mysql.Interpret("list event workers", err)
	}
	defer r.Close()
	for r.Next() {
		var z size
		if err := r.Scan(&z.id, &z.at, &z.len); err != nil {
			return nil, after, false, mysql.Interpret("list event workers", err)
		}
		sizes = append(sizes, z)
	}
	if err := r.Err(); err != nil {
		return nil, after, false, mysql.Interpret("list event workers", err)
	}
	r.Close()
	if len(sizes) == 0 {
		return nil, after, false, nil
	}
	take, sum := 0, int64(0)
	for take < len(sizes) && (take == 0 || sum+sizes[take].len <= int64(bytes)) {
		sum += sizes[take].len
		take++
	}
	ids := make([]string, take)
	for i := range ids {
		ids[i] = sizes[i].id
	}
	eq, args := expandStrings(recoveryQueries.WorkersByID, ids)
	got, err := scanWorkers(s.db.QueryContext(ctx, eq, append([]any{done}, args...)...))
	if err != nil {
		return nil, after, false, mysql.Interpret("list event workers", err)
	}
	byID := make(map[string]exactlyonce.EventWorker, len(got))
	for _, w := range got {
		byID[w.ID] = w
	}
	out := make([]exactlyonce.EventWorker, 0, len(got))
	for _, id := range ids {
		if w, ok := byID[id]; ok {
			out = append(out, w)
		}
	}
	last := sizes[take-1]
	return out, exactlyonce.WorkerCursor{At: last.at, ID: last.id}, take < len(sizes) || len(sizes) == rows, nil
}

func scanIDsInto(set map[string]bool, rows *sql.Rows, err error) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		set[id] = true
	}
	return rows.Err()
}

func cmpTime(t, zero time.Time) time.Time {
	if t.IsZero() {
		return zero
	}
	return t
}
