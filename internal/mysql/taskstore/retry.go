package taskstore

// A task's reads (its attempts, its reference's listing) and its manual retry. The statements are in
// tasks.sql.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/pages"
)

// Attempts returns a task's delivery attempts, oldest first.
func (s *Store) Attempts(ctx context.Context, id int64) ([]exactlyonce.Attempt, error) {
	return s.readAttempts(ctx, id, queries.Attempts, id)
}

// AttemptsAfter returns up to limit of task id's attempts numbered after after, in order: a page of
// GET /events/{id}/attempts, whose reads are bounded by what they return however often the task
// was retried by hand (each retry adds up to maxRetries+1 attempts, kept). A packed task's
// attempts come from its page, whose record holds them all (bounded by the pack).
func (s *Store) AttemptsAfter(ctx context.Context, id int64, after, limit int) ([]exactlyonce.Attempt, error) {
	if limit < 1 {
		return nil, fmt.Errorf("read attempts: limit %d; want at least 1", limit)
	}
	all, err := s.readAttempts(ctx, id, queries.AttemptsAfter, id, after, limit)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, a := range all {
		if a.Number > after && len(out) < limit {
			out = append(out, a)
		}
	}
	return out, nil
}

// readAttempts reads task id's attempts by q (args), from task_attempts, or, when it has none of
// the task's, from the task's page (read after, as Get).
func (s *Store) readAttempts(ctx context.Context, id int64, q string, args ...any) ([]exactlyonce.Attempt, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mysql.Interpret("read attempts", err)
	}
	defer rows.Close()
	out := []exactlyonce.Attempt{}
	for rows.Next() {
		var a exactlyonce.Attempt
		var us int64
		if err := rows.Scan(&a.Number, &a.Started, &us, &a.Status, &a.Error); err != nil {
			return nil, mysql.Interpret("read attempts", err)
		}
		a.Duration = time.Duration(us) * time.Microsecond
		out = append(out, a)
	}
	if err := rows.Err(); err != nil || len(out) > 0 {
		return out, mysql.Interpret("read attempts", err)
	}
	// None in task_attempts: the task may be packed, its attempts with it (read after, as Get). Not
	// if `events` still holds it (read after task_attempts: the pack deletes the event and its
	// attempts in one transaction, so a task still in `events` had its attempts in the first read):
	// a failed task, or a queued one, of a page whose other events are archived has no attempts
	// there, and asking its page's object for them was a GET, and a 503 while S3 was down, for an
	// answer that is empty.
	var kind exactlyonce.Kind
	var state exactlyonce.State
	var ref sql.NullString
	var hash uint32
	err = s.db.QueryRowContext(ctx, queries.TaskOf, id).Scan(&kind, &state, &ref, &hash)
	if err == nil {
		return out, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, mysql.Interpret("read attempts", err)
	}
	packed, ok, err := packedAttempts(ctx, s.history, s.db, id)
	if err != nil || !ok {
		return out, mysql.Interpret("read attempts", err)
	}
	return packed, nil
}

// ReferenceTasks returns up to limit tasks of a reference in delivery order, after the task with
// id after (0: from the first). An after that names no task of the reference is an EINVALID error.
//
// It reads the reference's directory (directory.go) and then its tasks by id, through the event
// store's Get (`events`, else the task's page): a cost set by the reference's tasks, not by the
// history. Until the backfill of a database migrated with tasks in it is done, it scans as it did
// before (referenceTasksScan). It is ReferencePage without its more: fewer than limit tasks do not
// mean the end when they come from more than maxListedArchivedPages archived pages.
func (s *Store) ReferenceTasks(ctx context.Context, ref string, after int64, limit int) ([]exactlyonce.Event, error) {
	out, _, err := s.ReferencePage(ctx, ref, after, limit)
	return out, err
}

// maxListedArchivedPages is the most archived pages one ReferencePage reads tasks from: a GET of
// each page's object, about 30 ms in AWS (1 s for 32), and a few ms locally.
const maxListedArchivedPages = 32

// ReferencePage is ReferenceTasks for a page of GET /references/{id}/events: up to limit tasks,
// and whether more may follow. It ends early, more true, before a task that would make it read a
// (maxListedArchivedPages+1)th archived page. By the directory, more is whether it has an entry after the last
// task read, so that telling it reads no task: a task read only to say so would be a GET of its
// page's object if it is archived, and a 503 while S3 is down, for a page whose tasks are all in
// the database. (An entry after it may be a reference's whose tag is the same, 2^-64 a pair: more
// is then true and the next page empty.) Until the backfill is done, it reads one task more.
func (s *Store) ReferencePage(ctx context.Context, ref string, after int64, limit int) (tasks []exactlyonce.Event, more bool, err error) {
	done, err := s.directoryComplete(ctx, s.db)
	if err != nil {
		return nil, false, mysql.Interpret("list reference tasks", err)
	}
	if !done {
		out, err := s.referenceTasksScan(ctx, ref, after, limit+1)
		if err != nil || len(out) <= limit {
			return out, false, err
		}
		return out[:limit], true, nil
	}
	entries, err := referenceEntries(ctx, s.db, ref)
	if err != nil {
		return nil, false, mysql.Interpret("list reference tasks", err)
	}
	var from int64
	if after > 0 {
		i := slices.IndexFunc(entries, func(e entry) bool { return e.id == after })
		if i < 0 {
			return nil, false, exactlyonce.Errorf(exactlyonce.EINVALID, "after: event %d is not a task of this reference", after)
		}
		from = entries[i].position
	}
	out := []exactlyonce.Event{}
	high := int64(-1)                  // the move's high_page, read once, at the first task past the window
	archived := map[int64]bool{}       // the archived pages this page reads
	window := s.history.Archive == nil // no archive: no task needs S3
	for _, en := range entries {
		if en.position <= from {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		if page := pages.PageOf(en.id); !window && !archived[page] {
			if high < 0 {
				if high, err = s.history.HighPage(ctx, s.db); err != nil {
					return nil, false, mysql.Interpret("list reference tasks", err)
				}
			}
			if page < high {
				// Its page may be in the bucket only: a GET (unless cached). A page ends before
				// maxListedArchivedPages of them, so that its cost is bounded by what it returns
				// (tens of milliseconds a GET in AWS), well inside the API's ReadTimeout, where a
				// thousand tasks on as many archived pages were a thousand GETs; the next page goes on.
				if len(archived) == maxListedArchivedPages && len(out) > 0 {
					return out, true, nil
				}
				archived[page] = true
			}
		}
		ev, err := s.events.Get(ctx, en.id)
		if exactlyonce.ErrorCode(err) == exactlyonce.ENOTFOUND {
			return nil, false, mysql.Interpret("list reference tasks", fmt.Errorf("the directory of reference %q names task %d, which is not stored", ref, en.id))
		}
		if err != nil {
			return nil, false, err
		}
		if ev.Task == nil || ev.Task.ReferenceID != ref {
			continue // a reference whose tag is the same (directory.go, cellOf)
		}
		out = append(out, exactlyonce.Event{ID: ev.ID, Kind: exactlyonce.KindTask, State: ev.State, Attempts: ev.Attempts,
			CreatedAt: ev.CreatedAt, ProcessedAt: ev.ProcessedAt,
			Task: &exactlyonce.Task{ReferenceID: ref, Position: ev.Task.Position}})
	}
	return out, false, nil
}

// referenceTasksScan is ReferenceTasks by scans of `events` and of the packed history, for a
// database whose directory is not complete yet (the backfill, backfill.go).
func (s *Store) referenceTasksScan(ctx context.Context, ref string, after int64, limit int) ([]exactlyonce.Event, error) {
	var from int64
	if after > 0 {
		var pos sql.NullInt64
		err := s.db.QueryRowContext(ctx, queries.ReferencePosition, after, ref).Scan(&pos)
		if errors.Is(err, sql.ErrNoRows) {
			// Not in `events`: a packed task of the reference, maybe.
			r, ok, perr := s.history.Get(ctx, s.db, after)
			if perr != nil {
				return nil, mysql.Interpret("list reference tasks", perr)
			}
			if ok && r.Kind == string(exactlyonce.KindTask) && r.ReferenceID != nil && *r.ReferenceID == ref && r.Position != nil {
				pos, err = sql.NullInt64{Int64: *r.Position, Valid: true}, nil
			}
		}
		if errors.Is(err, sql.ErrNoRows) || (err == nil && !pos.Valid) {
			return nil, exactlyonce.Errorf(exactlyonce.EINVALID, "after: event %d is not a task of this reference", after)
		}
		if err != nil {
			return nil, mysql.Interpret("list reference tasks", err)
		}
		from = pos.Int64
	}
	rows, err := s.db.QueryContext(ctx, queries.ReferenceTasks, ReferenceHash(ref), ref, from, limit)
	if err != nil {
		return nil, mysql.Interpret("list reference tasks", err)
	}
	defer rows.Close()
	out := []exactlyonce.Event{}
	for rows.Next() {
		e := exactlyonce.Event{Kind: exactlyonce.KindTask, Task: &exactlyonce.Task{ReferenceID: ref}}
		var processedAt sql.NullTime
		if err := rows.Scan(&e.ID, &e.State, &e.Task.Position, &e.Attempts, &e.CreatedAt, &processedAt); err != nil {
			return nil, mysql.Interpret("list reference tasks", err)
		}
		e.State = eventstore.StoredState(e.State)
		if processedAt.Valid {
			e.ProcessedAt = &processedAt.Time
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, mysql.Interpret("list reference tasks", err)
	}
	packed, err := pagestore.OfReference(ctx, s.db, ref, ReferenceHash(ref))
	if err != nil {
		return nil, mysql.Interpret("list reference tasks", err)
	}
	return mergeReferenceTasks(out, packed, from, limit), nil
}

// RetryTask gives a failed task a fresh retry budget (its attempts kept: the next is numbered after them). A task of a reference goes
// back in its place if no later task of its reference has started (those go back to waiting behind
// it), else to the end of its reference's queue. It returns where it went, and whether it is
// pending now (it heads its reference: a queue message may name it). A task that is not failed is
// an ESTATE error; an unknown id ENOTFOUND.
//
// A task of a reference with no open task that goes back in its place (its reference's last task)
// is decided and written before the bucket is taken, which is then held only to check and commit,
// as RetryReference does (retryInPlaceFirst); a check that fails runs the retry again with the
// bucket taken before it decides.
func (s *Store) RetryTask(ctx context.Context, id int64) (exactlyonce.RetryPlacement, bool, error) {
	optimistic := true
	var placement exactlyonce.RetryPlacement
	var head bool
	var err error
	for again := 0; ; again++ {
		placement, head, err = s.retryTask(ctx, id, optimistic)
		if errors.Is(err, errReferenceMoved) {
			// Only the retry in place before the bucket gives up so; with the bucket taken first,
			// it cannot.
			optimistic = false
			placement, head, err = s.retryTask(ctx, id, false)
		}
		// A task that failed again between the lock that missed it and the read of its state
		// (retried by another caller and delivered meanwhile) is retried again, as a retry that
		// came a moment later would be; a task that keeps slipping past is refused as it is.
		if !errors.Is(err, errFailedAgain) || again == maxFailedAgain {
			break
		}
	}
	if errors.Is(err, errFailedAgain) {
		err = exactlyonce.Errorf(exactlyonce.ESTATE, "task %d was retried and failed again %d times while this retry ran: read it, and retry it again if it should be", id, maxFailedAgain+1)
	}
	if err != nil {
		return "", false, mysql.Interpret("retry task", err)
	}
	return placement, head, nil
}

// errFailedAgain is retryTask's error when the task was not failed under its lock but is failed
// when read again: RetryTask runs the retry again, at most maxFailedAgain times more.
var errFailedAgain = errors.New("the task failed again meanwhile")

const maxFailedAgain = 3

// retryTask is one transaction of RetryTask; optimistic lets a retry in place of a reference with
// no open task go before the bucket (retryInPlaceFirst).
func (s *Store) retryTask(ctx context.Context, id int64, optimistic bool) (exactlyonce.RetryPlacement, bool, error) {
	var placement exactlyonce.RetryPlacement
	var head bool
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		// Read the task's reference without a lock, then lock the task (and check again that it is
		// failed), then its bucket.
		var kind exactlyonce.Kind
		var state exactlyonce.State
		var ref sql.NullString
		var hash uint32
		err := tx.QueryRowContext(ctx, queries.TaskOf, id).
			Scan(&kind, &state, &ref, &hash)
		if errors.Is(err, sql.ErrNoRows) {
			// Not in `events`: packed (so processed, never failed: failed events are not packed) or unknown.
			r, ok, perr := s.history.Get(ctx, tx, id)
			if perr != nil {
				return perr
			}
			if !ok {
				return exactlyonce.Errorf(exactlyonce.ENOTFOUND, "event %d not found", id)
			}
			if r.Kind != string(exactlyonce.KindTask) {
				return exactlyonce.Errorf(exactlyonce.ESTATE, "event %d is not a task: only a failed task can be retried", id)
			}
			return exactlyonce.Errorf(exactlyonce.ESTATE, "task %d is %s, not failed: only a failed task can be retried",
				id, exactlyonce.TaskState(eventstore.StoredState(exactlyonce.State(r.State))))
		}
		if err != nil {
			return err
		}
		if kind != exactlyonce.KindTask {
			return exactlyonce.Errorf(exactlyonce.ESTATE, "event %d is not a task: only a failed task can be retried", id)
		}
		// The task, then its bucket: every manual retry locks its failed tasks before the bucket
		// (RetryReference says why that order).
		var pos int64
		var refText string
		err = tx.QueryRowContext(ctx, queries.LockFailedTask, id).Scan(&state, &refText, &hash, &pos)
		if errors.Is(err, sql.ErrNoRows) {
			// Not failed any more: retried since TaskOf read it (a bulk retry of its reference held
			// it, or another caller's retry). The answer names its state now, read again (READ
			// COMMITTED), not TaskOf's, which said "task 30 is failed, not failed"
			// (TestARetryOfATaskWaitsForABulkRetryOfItsReferenceWithoutADeadlock).
			if s.onRetryMissed != nil {
				s.onRetryMissed()
			}
			if err := tx.QueryRowContext(ctx, queries.TaskOf, id).Scan(&kind, &state, &ref, &hash); err != nil {
				if !errors.Is(err, sql.ErrNoRows) {
					return err
				}
				state = exactlyonce.Processed // packed since: delivered
			}
			if eventstore.StoredState(state) == exactlyonce.Failed {
				// Failed again since the lock missed it (retried and delivered meanwhile): it is a
				// failed task now, so the retry runs again rather than answer "task 1 is failed, not
				// failed" (RetryTask).
				return errFailedAgain
			}
			return exactlyonce.Errorf(exactlyonce.ESTATE, "task %d is %s, not failed: only a failed task can be retried",
				id, exactlyonce.TaskState(eventstore.StoredState(state)))
		}
		if err != nil {
			return err
		}
		var folded int64
		if state >= exactlyonce.Processed+eventstore.CountedShift {
			folded = 1
		}
		if optimistic && refText != "" {
			out, ok, err := s.retryAloneInPlaceFirst(ctx, tx, refText, hash, failedTask{id: id, position: pos}, folded)
			if err != nil {
				return err
			}
			if ok {
				placement, head = out.Placement, true
				return nil
			}
		}
		if err := lockTaskBucketsOnly(ctx, tx, bucketsOf(ref, hash)); err != nil {
			return err
		}
		newState := exactlyonce.Pending
		placement = exactlyonce.RetryAlone
		if refText != "" {
			placement, newState, pos, err = s.placeRetry(ctx, tx, refText, hash, pos)
			if err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, queries.RetryTask, newState, nullPosition(refText, pos), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("retried %d rows for task %d", n, id)
		}
		if placement == exactlyonce.RetryAtEnd {
			// Its new position, in its reference's directory (the last entry of a task wins).
			if err := appendDirectory(ctx, tx, []refEntry{{ref: refText, entry: entry{id: id, position: pos}}}); err != nil {
				return err
			}
		}
		if folded > 0 {
			if _, err := tx.ExecContext(ctx, queries.UncountRetried, folded); err != nil {
				return err
			}
		}
		head = newState == exactlyonce.Pending
		return nil
	})
	return placement, head, err
}

// retryAloneInPlaceFirst is retryInPlaceFirst for one locked failed task f of reference ref, if
// the reference has no open task (OpenHeads, a consistent read: RetryInPlaceCheck reads it again
// under the bucket) and its directory is complete: false, nothing written, if not, or if a later
// task has started.
func (s *Store) retryAloneInPlaceFirst(ctx context.Context, tx *sql.Tx, ref string, hash uint32, f failedTask, folded int64) (exactlyonce.RetriedReference, bool, error) {
	done, err := s.directoryComplete(ctx, tx)
	if err != nil || !done {
		return exactlyonce.RetriedReference{}, false, err
	}
	heads, err := openHeads(ctx, tx, map[string]uint32{ref: hash})
	if err != nil || len(heads[ref]) > 0 {
		return exactlyonce.RetriedReference{}, false, err
	}
	return s.retryInPlaceFirst(ctx, tx, ref, hash, []failedTask{f}, folded, nil, false)
}

func bucketsOf(ref sql.NullString, hash uint32) []int64 {
	if !ref.Valid || ref.String == "" {
		return nil
	}
	return []int64{taskBucket(hash)}
}

func nullPosition(ref string, pos int64) sql.NullInt64 {
	return sql.NullInt64{Int64: pos, Valid: ref != ""}
}

// placeRetry decides where a retried task of reference ref (at position pos) goes, with its bucket
// locked: in place, ahead of the reference's pending head, if no later task has started; else at
// the end, with a new position from the bucket. The reference's head is locked first, so that no
// claim starts it and no settlement promotes past it while the retry decides.
func (s *Store) placeRetry(ctx context.Context, tx *sql.Tx, ref string, hash uint32, pos int64) (exactlyonce.RetryPlacement, exactlyonce.State, int64, error) {
	refs := map[string]uint32{ref: hash}
	heads, err := openHeads(ctx, tx, refs)
	if err != nil {
		return "", 0, 0, err
	}
	open, err := lockHeads(ctx, tx, refs, heads)
	if err != nil {
		return "", 0, 0, err
	}
	started, err := s.laterStarted(ctx, tx, ref, hash, pos, nil)
	if err != nil {
		return "", 0, 0, err
	}
	type head struct{ id, pos int64 }
	var pending []head
	rows, err := tx.QueryContext(ctx, queries.ReferenceHead, hash, ref)
	if err != nil {
		return "", 0, 0, err
	}
	for rows.Next() {
		var h head
		if err := rows.Scan(&h.id, &h.pos); err != nil {
			rows.Close()
			return "", 0, 0, err
		}
		pending = append(pending, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", 0, 0, err
	}
	if !started && !slices.ContainsFunc(pending, func(h head) bool { return h.pos < pos }) {
		for _, h := range pending {
			if _, err := tx.ExecContext(ctx, queries.RequeueTask, h.id); err != nil {
				return "", 0, 0, err
			}
		}
		return exactlyonce.RetryInPlace, exactlyonce.Pending, pos, nil
	}
	// To the end: the next position of the bucket's sequence, taken as a create takes it, behind
	// the head locked above, if there is one.
	b := taskBucket(hash)
	before, _, err := advanceTaskBuckets(ctx, tx, map[int64]int64{b: 1}, refs)
	if err != nil {
		return "", 0, 0, err
	}
	state := exactlyonce.Pending
	if open[ref] {
		state = exactlyonce.Queued
	}
	return exactlyonce.RetryAtEnd, state, before[b] + 1, nil
}

// laterStarted tells whether a task of reference ref after position pos has started, but those of
// except (failed tasks retried with it, which are after it): by the reference's directory
// (laterTaskStarted), or, until the backfill is done, by LaterTaskStarted's scan of `events` and
// then the packed history's (a packed task was delivered, so started).
func (s *Store) laterStarted(ctx context.Context, tx *sql.Tx, ref string, hash uint32, pos int64, except map[int64]bool) (bool, error) {
	done, err := s.directoryComplete(ctx, tx)
	if err != nil {
		return false, err
	}
	if done {
		return laterTaskStarted(ctx, tx, ref, pos, except)
	}
	var started int64
	if err := tx.QueryRowContext(ctx, queries.LaterTaskStarted, hash, ref, pos).Scan(&started); err != nil {
		return false, err
	}
	started -= int64(len(except)) // failed, after pos: counted by the scan
	if started == 0 {             // nothing in `events`: a later task may have been delivered and packed
		if started, err = packedLaterTasks(ctx, tx, ref, pos); err != nil {
			return false, err
		}
	}
	return started > 0, nil
}
