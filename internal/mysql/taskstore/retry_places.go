package taskstore

// Where a reference's retried tasks go: in place or to the end, the first part's decision and a
// later part's continuation of it (the bulk retry's flow is in retry_reference.go, its row work in
// retry_rows.go).

import (
	"context"
	"database/sql"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// continueRetryHeld is a later part of a retry in parts whose head h the first read found held:
// the failed tasks of the part locked, then the bucket, then h, which must still be the
// reference's only open task, and held (OpenOfReference, which reads `open` only: the failed set
// is not scanned again under the bucket); else errReferenceMoved, and the next round decides
// with the bucket taken first (retryReferenceLocked).
func (s *Store) continueRetryHeld(ctx context.Context, tx *sql.Tx, ref string, hash uint32, failed []failedTask, folded int64, h openTask, more bool, known *knownFailed) (exactlyonce.RetriedReference, error) {
	if err := lockTaskBucketsOnly(ctx, tx, []int64{taskBucket(hash)}); err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	q, args := mysql.ExpandIDs(queries.LockHeads, []int64{h.id})
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	open, err := openOfReference(ctx, tx, ref, hash)
	if err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	if held := heldHead(open); held == nil || held.id != h.id {
		return exactlyonce.RetriedReference{}, errReferenceMoved
	}
	return s.writeRetry(ctx, tx, ref, hash, failed, folded, &h, nil, true, more, known)
}

// continueRetryFrontier is a later part of a retry to the end behind an open task, whose frontier
// (id, the last task its parts have retried, held: HoldRetried) the first read found queued: the
// failed tasks of the part locked, then the bucket, then the frontier (LockFrontier), which must
// still be held; pending by now (the tasks before it were delivered), it must be the reference's
// only open task, as a held head. Else errReferenceMoved, and the next round decides with the
// bucket taken first (retryReferenceLocked).
func (s *Store) continueRetryFrontier(ctx context.Context, tx *sql.Tx, ref string, hash uint32, failed []failedTask, folded int64, id int64, more bool, known *knownFailed) (exactlyonce.RetriedReference, error) {
	if err := lockTaskBucketsOnly(ctx, tx, []int64{taskBucket(hash)}); err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	f, err := lockFrontier(ctx, tx, id)
	if err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	if f == nil {
		return exactlyonce.RetriedReference{}, errReferenceMoved
	}
	if f.state == exactlyonce.Pending {
		open, err := openOfReference(ctx, tx, ref, hash)
		if err != nil {
			return exactlyonce.RetriedReference{}, err
		}
		if h := heldHead(open); h == nil || h.id != f.id {
			return exactlyonce.RetriedReference{}, errReferenceMoved
		}
	}
	return s.writeRetry(ctx, tx, ref, hash, failed, folded, f, nil, true, more, known)
}

// continueRetry places the next part of a retry in parts whose first part made head h and holds it
// (the reference delivered nothing since, and a create queued behind h): as the first part
// decided. In place (h, the first failed task, stands before the failed tasks left): they keep
// their places, queued. To the end (h stands after them, at the first of the positions the first
// part took from the bucket for all of them): they take the next of those positions, after the
// tasks earlier parts moved there, which hold h's position and the ones after it without a gap (a
// create between parts took its positions after all of them), read from the reference's
// directory. The same for a retry to the end behind an open task, whose frontier h is the last task
// its parts placed. They must fit before the reference's next task after them (a create between
// parts): the failed tasks the retry began with do, the places were taken for them; a task that
// failed since (the task open then, or one delivered after its retry) may not: fit says how many
// of failed (the first, by position, so those the retry began with before any that failed since)
// have a place; the others are left failed, and the retry ends (writeRetry).
func continueRetry(ctx context.Context, tx *sql.Tx, ref string, failed []failedTask, h openTask) (p retryPlaces, fit int, err error) {
	p = retryPlaces{placement: exactlyonce.RetryInPlace, states: make([]exactlyonce.State, len(failed)), positions: make([]int64, len(failed))}
	for i, f := range failed {
		p.states[i], p.positions[i] = exactlyonce.Queued, f.position
	}
	if h.pos < failed[0].position {
		return p, len(failed), nil
	}
	entries, err := referenceEntries(ctx, tx, ref)
	if err != nil {
		return retryPlaces{}, 0, err
	}
	taken := map[int64]bool{}
	for _, e := range entries {
		taken[e.position] = true
	}
	last := h.pos
	for taken[last+1] {
		last++
	}
	fit = len(failed)
	for _, e := range entries {
		if e.position > last && e.position <= last+int64(fit) {
			fit = int(e.position - last - 1)
		}
	}
	p.placement = exactlyonce.RetryAtEnd
	for i := range failed {
		p.positions[i] = last + 1 + int64(i)
	}
	return p, fit, nil
}

type retryPlaces struct {
	placement exactlyonce.RetryPlacement
	states    []exactlyonce.State
	positions []int64
}

// placeRetries decides where the failed tasks of reference ref (locked, in position order) go, with
// the reference's bucket and its open tasks (heads, locked, as read once locked) held.
// In place: every task after the first failed one is either failed too or has not started
// (laterStarted), and every open task of the reference is a pending one after it, which goes back
// to the queue (RequeueTask); the failed tasks keep their positions, the first pending, the others
// queued. Else to the end: positions taken from the bucket's sequence as a create takes them, the
// first pending if the reference has no open task, every other queued.
//
// In parts (parts), the failed tasks after the first, of this part or a later one, are left out of
// the question by their state (laterUnfailedStarted: by the directory, or the scan while it is not
// complete); with more to come (more), a retry to the
// end takes a position for every failed task of the reference (CountFailedOfReference). One behind
// an open task makes no head: writeRetry holds its frontier, the last task it places.
func (s *Store) placeRetries(ctx context.Context, tx *sql.Tx, ref string, hash uint32, failed []failedTask, heads []openTask, parts, more bool) (retryPlaces, error) {
	first := failed[0].position
	var started bool
	var err error
	if parts {
		started, err = s.laterUnfailedStarted(ctx, tx, ref, hash, first)
	} else {
		retried := map[int64]bool{} // the failed tasks after the first, retried with it
		for _, f := range failed[1:] {
			retried[f.id] = true
		}
		started, err = s.laterStarted(ctx, tx, ref, hash, first, retried)
	}
	if err != nil {
		return retryPlaces{}, err
	}
	var pending []openTask
	for _, h := range heads {
		if h.state == exactlyonce.Pending {
			pending = append(pending, h)
		}
	}
	open := len(heads) > 0
	// A head that is not pending is processing: it has started, wherever it stands.
	inPlace := !started && len(pending) == len(heads)
	for _, h := range pending {
		inPlace = inPlace && h.pos > first
	}
	p := retryPlaces{states: make([]exactlyonce.State, len(failed)), positions: make([]int64, len(failed))}
	for i := range p.states {
		p.states[i] = exactlyonce.Queued
	}
	if inPlace {
		for _, h := range pending {
			if _, err := tx.ExecContext(ctx, queries.RequeueTask, h.id); err != nil {
				return retryPlaces{}, err
			}
		}
		for i, f := range failed {
			p.positions[i] = f.position
		}
		p.placement = exactlyonce.RetryInPlace
		p.states[0] = exactlyonce.Pending
		return p, nil
	}
	take := int64(len(failed))
	if more {
		if err := tx.QueryRowContext(ctx, retryQueries.CountFailedOfReference, hash, ref).Scan(&take); err != nil {
			return retryPlaces{}, err
		}
	}
	b := taskBucket(hash)
	before, _, err := advanceTaskBuckets(ctx, tx, map[int64]int64{b: take}, map[string]uint32{ref: hash})
	if err != nil {
		return retryPlaces{}, err
	}
	for i := range failed {
		p.positions[i] = before[b] + 1 + int64(i)
	}
	p.placement = exactlyonce.RetryAtEnd
	if !open {
		p.states[0] = exactlyonce.Pending
	}
	return p, nil
}

// openOfReference reads OpenOfReference: the reference's open tasks, each with whether it is a
// bulk retry's held head.
func openOfReference(ctx context.Context, tx *sql.Tx, ref string, hash uint32) ([]openTask, error) {
	rows, err := tx.QueryContext(ctx, retryQueries.OpenOfReference, hash, ref)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var open []openTask
	for rows.Next() {
		var t openTask
		if err := rows.Scan(&t.id, &t.state, &t.pos, &t.held); err != nil {
			return nil, err
		}
		open = append(open, t)
	}
	return open, rows.Err()
}

// laterUnfailedStarted is the question of a bulk retry in parts: has a task of reference ref after
// position pos started, the failed ones left out by their state (all are retried, in this part or
// a later one)? By the directory (tasksStartedAfter) once it is complete; before, by the scan
// (LaterUnfailedTaskStarted, then the packed history), as laterStarted.
func (s *Store) laterUnfailedStarted(ctx context.Context, tx *sql.Tx, ref string, hash uint32, pos int64) (bool, error) {
	done, err := s.directoryComplete(ctx, tx)
	if err != nil {
		return false, err
	}
	if done {
		entries, err := referenceEntries(ctx, tx, ref)
		if err != nil {
			return false, err
		}
		return tasksStartedAfter(ctx, tx, entries, pos, nil, true)
	}
	var started int64
	if err := tx.QueryRowContext(ctx, retryQueries.LaterUnfailedTaskStarted, hash, ref, pos).Scan(&started); err != nil {
		return false, err
	}
	if started == 0 { // nothing in `events`: a later task may have been delivered and packed
		if started, err = packedLaterTasks(ctx, tx, ref, pos); err != nil {
			return false, err
		}
	}
	return started > 0, nil
}
