package taskstore

// The bulk retry of a reference's failed tasks (POST /references/{referenceId}/retry). The
// statements are in tasks.sql.

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
)

// RetryReference gives every failed task of reference ref a fresh retry budget, in one transaction,
// in their order, by RetryTask's rules applied to them as one: they go back in their places if no
// task of the reference after the first of them has started (but the failed ones themselves), and
// no task of the reference is open before it; else all to the end of the reference's queue, in
// their order, behind the task open now. Either way only one task of the reference is open (its
// head) and the others are queued, in position order. A reference with no failed task is left as
// it is (no task retried, no error).
//
// Locks are taken in the order every manual retry takes them (RetryTask too): the failed tasks
// first, then the reference's bucket, then its head (so no claim starts it and no settlement
// promotes past it), then settled_count. No transaction that holds a bucket waits for a failed
// task's row (creates, settlements and the backfill never lock one, and every retry locks its
// failed tasks before its bucket), so locking them first cannot deadlock with a create.
//
// The bucket is what a create of the reference takes before it reads the reference's heads, and so
// what keeps a retry and a create of one reference apart; every create of the bucket's other
// references takes it too. So the common case holds it for as little as it can: a reference with no
// open task whose failed tasks go back in their places (its last tasks failed) is decided and
// written before the bucket is taken (retryInPlaceFirst), and the bucket is then held for one read
// that checks nothing of the reference changed meanwhile, and the commit. Any other case, or a
// check that fails (a create of the reference came in between), takes the bucket before it decides
// (retryReferenceLocked), in a transaction of its own.
func (s *Store) RetryReference(ctx context.Context, ref string) (exactlyonce.RetriedReference, error) {
	hash := ReferenceHash(ref)
	var out exactlyonce.RetriedReference
	first := true
	for round := 1; ; round++ {
		err := s.core.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			out, err = s.retryReference(ctx, tx, ref, hash, first)
			return err
		})
		if errors.Is(err, errReferenceMoved) && round < maxRetryRounds {
			first = false // the next transaction takes the bucket before it decides
			continue
		}
		if err != nil {
			return exactlyonce.RetriedReference{}, mysql.Interpret("retry reference", err)
		}
		if out.IDs == nil {
			out.IDs = []int64{}
		}
		return out, nil
	}
}

// errReferenceMoved is a bulk retry's transaction giving up because the reference changed between
// its first read and its locks (a task failed, was retried or was created meanwhile): the retry
// rolls it back and runs again, the bucket taken first. Each round follows a change of the
// reference by someone else, so maxRetryRounds is never reached but by a reference that keeps
// changing.
var errReferenceMoved = errors.New("the reference changed while its retry was being decided")

const maxRetryRounds = 10

// retryReference is one transaction of RetryReference: the reference's heads and failed tasks read
// (no lock), the failed tasks locked, then either retryInPlaceFirst (optimistic, and the case
// allows it) or retryReferenceLocked.
func (s *Store) retryReference(ctx context.Context, tx *sql.Tx, ref string, hash uint32, optimistic bool) (exactlyonce.RetriedReference, error) {
	heads, ids, err := readRetryState(ctx, tx, ref, hash)
	if err != nil || len(ids) == 0 {
		return exactlyonce.RetriedReference{}, err
	}
	failed, folded, err := lockFailedTasks(ctx, tx, ids)
	if err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	if optimistic && len(heads) == 0 {
		done, err := s.directoryComplete(ctx, tx)
		if err != nil {
			return exactlyonce.RetriedReference{}, err
		}
		if done {
			out, ok, err := s.retryInPlaceFirst(ctx, tx, ref, hash, failed, folded)
			if err != nil || ok {
				return out, err
			}
		}
	}
	return s.retryReferenceLocked(ctx, tx, ref, hash, failed, folded)
}

// retryInPlaceFirst retries the locked failed tasks of reference ref, which had no open task when
// read, in their places, deciding and writing before it takes the bucket: false if they cannot go
// in their places (a later task has started), the bucket not taken. The decision rests on the
// reference's directory cell and on its having no open task; what can change either once the
// failed tasks are locked is a task of the reference created, or retried to the end, meanwhile
// (both append to the cell, under the bucket). So, once it holds the bucket, it reads the
// reference's open tasks and its cell again (RetryInPlaceCheck): anything open but its own new
// head, or an entry of the reference it did not decide on, and the transaction is rolled back
// (errReferenceMoved). A create of the reference that came before the check has committed by then
// (the check waits for the bucket), and one that comes after waits for the commit and finds the
// retried head, as it finds any head.
func (s *Store) retryInPlaceFirst(ctx context.Context, tx *sql.Tx, ref string, hash uint32, failed []failedTask, folded int64) (exactlyonce.RetriedReference, bool, error) {
	c := cellOf(ref)
	cellBytes, err := readEntryBytes(ctx, tx, c)
	if err != nil {
		return exactlyonce.RetriedReference{}, false, err
	}
	decided := cellEntries(cellBytes, c.tag)
	retried := map[int64]bool{}
	for _, f := range failed[1:] {
		retried[f.id] = true
	}
	started, err := tasksStartedAfter(ctx, tx, decided, failed[0].position, retried)
	if err != nil || started {
		return exactlyonce.RetriedReference{}, false, err
	}
	place := retryPlaces{placement: exactlyonce.RetryInPlace, states: make([]exactlyonce.State, len(failed)), positions: make([]int64, len(failed))}
	for i, f := range failed {
		place.states[i], place.positions[i] = exactlyonce.Queued, f.position
	}
	place.states[0] = exactlyonce.Pending
	if err := retryTasks(ctx, tx, failed, place); err != nil {
		return exactlyonce.RetriedReference{}, false, err
	}
	if s.beforeRetryBucket != nil {
		s.beforeRetryBucket()
	}
	if err := lockTaskBucketsOnly(ctx, tx, []int64{taskBucket(hash)}); err != nil {
		return exactlyonce.RetriedReference{}, false, err
	}
	open, now, err := readInPlaceCheck(ctx, tx, ref, hash, c)
	if err != nil {
		return exactlyonce.RetriedReference{}, false, err
	}
	if len(open) != 1 || open[0] != failed[0].id || !slices.Equal(cellEntries(now, c.tag), decided) {
		return exactlyonce.RetriedReference{}, false, errReferenceMoved
	}
	if folded > 0 {
		if _, err := tx.ExecContext(ctx, queries.UncountRetried, folded); err != nil {
			return exactlyonce.RetriedReference{}, false, err
		}
	}
	out := exactlyonce.RetriedReference{Placement: exactlyonce.RetryInPlace, Head: failed[0].id}
	for _, f := range failed {
		out.IDs = append(out.IDs, f.id)
	}
	return out, true, nil
}

// readInPlaceCheck reads RetryInPlaceCheck: the ids of the reference's open tasks, and its cell
// with what was logged for it (as readEntryBytes returns them).
func readInPlaceCheck(ctx context.Context, tx *sql.Tx, ref string, hash uint32, c cell) ([]int64, []byte, error) {
	q := strings.Replace(retryQueries.RetryInPlaceCheck, "/*column*/", fmt.Sprintf("d%d", c.col), 1)
	rows, err := tx.QueryContext(ctx, q, hash, ref, c.slot, c.col, c.slot)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var open []int64
	var logged, cellB []byte
	cells := 0
	for rows.Next() {
		var part int
		var id sql.NullInt64
		var b []byte
		if err := rows.Scan(&part, &id, &b); err != nil {
			return nil, nil, err
		}
		switch part {
		case 0:
			open = append(open, id.Int64)
		case 1:
			logged = append(logged, b...)
		default:
			cellB, cells = b, cells+1
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if cells != 1 {
		return nil, nil, fmt.Errorf("reference_directory has %d rows for slot %d: the table was changed by hand", cells, c.slot)
	}
	return open, append(logged, cellB...), nil
}

// retryReferenceLocked retries the locked failed tasks of reference ref with its bucket and heads
// held while it decides: the bucket, then the heads (read and locked until every head read is
// held), then the failed tasks read again, which must be the ones locked (a task of the reference
// that failed since the first read was not locked first: errReferenceMoved, and the next round
// locks it with the others).
func (s *Store) retryReferenceLocked(ctx context.Context, tx *sql.Tx, ref string, hash uint32, failed []failedTask, folded int64) (exactlyonce.RetriedReference, error) {
	if err := lockTaskBucketsOnly(ctx, tx, []int64{taskBucket(hash)}); err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	heads, ids, err := lockedRetryState(ctx, tx, ref, hash)
	if err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	if len(ids) != len(failed) {
		return exactlyonce.RetriedReference{}, errReferenceMoved
	}
	locked := map[int64]bool{}
	for _, f := range failed {
		locked[f.id] = true
	}
	for _, id := range ids {
		if !locked[id] {
			return exactlyonce.RetriedReference{}, errReferenceMoved
		}
	}
	place, err := s.placeRetries(ctx, tx, ref, hash, failed, heads)
	if err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	if err := retryTasks(ctx, tx, failed, place); err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	var out exactlyonce.RetriedReference
	for i, f := range failed {
		out.IDs = append(out.IDs, f.id)
		if place.states[i] == exactlyonce.Pending {
			out.Head = f.id
		}
	}
	if place.placement == exactlyonce.RetryAtEnd {
		// Their new positions, in the reference's directory (the last entry of a task wins).
		entries := make([]refEntry, len(failed))
		for i, f := range failed {
			entries[i] = refEntry{ref: ref, entry: entry{id: f.id, position: place.positions[i]}}
		}
		if err := appendDirectory(ctx, tx, entries); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
	}
	if folded > 0 {
		if _, err := tx.ExecContext(ctx, queries.UncountRetried, folded); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
	}
	out.Placement = place.placement
	return out, nil
}

// failedTask is a failed task locked for a retry.
type failedTask struct {
	id, position int64
}

// lockFailedTasks locks the failed tasks ids (LockFailedTasks) and returns them in position order,
// with how many of them were folded (state 40). A task of ids that is not failed any more was
// retried since it was read (a fold moves a failed task from 20 to 40, which LockFailedTasks still
// reads): errReferenceMoved, and the next round reads the reference again.
func lockFailedTasks(ctx context.Context, tx *sql.Tx, ids []int64) ([]failedTask, int64, error) {
	q, args := mysql.ExpandIDs(queries.LockFailedTasks, ids)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []failedTask
	var folded int64
	for rows.Next() {
		var f failedTask
		var state exactlyonce.State
		if err := rows.Scan(&f.id, &state, &f.position); err != nil {
			return nil, 0, err
		}
		if state == exactlyonce.Failed+eventstore.CountedShift {
			folded++
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if len(out) != len(ids) {
		return nil, 0, errReferenceMoved
	}
	return out, folded, nil
}

// retryPlaces is where each failed task of a bulk retry goes: its state and position, by index.
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
func (s *Store) placeRetries(ctx context.Context, tx *sql.Tx, ref string, hash uint32, failed []failedTask, heads []openTask) (retryPlaces, error) {
	first := failed[0].position
	retried := map[int64]bool{} // the failed tasks after the first, retried with it
	for _, f := range failed[1:] {
		retried[f.id] = true
	}
	started, err := s.laterStarted(ctx, tx, ref, hash, first, retried)
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
	b := taskBucket(hash)
	before, _, err := advanceTaskBuckets(ctx, tx, map[int64]int64{b: int64(len(failed))}, map[string]uint32{ref: hash})
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

//go:embed retry.sql
var retryFiles embed.FS

// retryTexts are the statements of retry.sql.
type retryTexts struct {
	RetryTasks, RetryStateOfReference, RetryInPlaceCheck string
}

var retryQueries = mysql.MustLoadQueries[retryTexts](retryFiles)

// maxRetryBatch is the most tasks one RetryTasks statement retries: five arguments each, the
// statement's text about 6 KB.
const maxRetryBatch = 200

// retryTasks retries the locked failed tasks as place says, maxRetryBatch a statement (RetryTasks),
// and checks that each statement changed every task it named.
func retryTasks(ctx context.Context, tx *sql.Tx, failed []failedTask, place retryPlaces) error {
	for lo := 0; lo < len(failed); lo += maxRetryBatch {
		hi := min(len(failed), lo+maxRetryBatch)
		var states, positions, ids []any
		for i := lo; i < hi; i++ {
			states = append(states, failed[i].id, place.states[i])
			positions = append(positions, failed[i].id, place.positions[i])
			ids = append(ids, failed[i].id)
		}
		whens := strings.TrimSuffix(strings.Repeat("WHEN ? THEN ? ", hi-lo), " ")
		q := strings.Replace(retryQueries.RetryTasks, "/*states*/", whens, 1)
		q = strings.Replace(q, "/*positions*/", whens, 1)
		q = strings.Replace(q, "/*ids*/", mysql.Placeholders(hi-lo), 1)
		args := append(append(append(states, positions...), ids...), hi-lo)
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != int64(hi-lo) {
			return fmt.Errorf("retried %d of %d failed tasks", n, hi-lo)
		}
	}
	return nil
}

// openTask is an open task (a head) of a reference: pending or processing.
type openTask struct {
	id    int64
	state exactlyonce.State
	pos   int64
}

// lockedRetryState locks the open tasks (heads) of reference ref, whose bucket tx holds, and
// returns them as they are once locked, with the ids of the reference's failed tasks read then, in
// position order (RetryStateOfReference, read again after each LockHeads: a head settled while
// LockHeads waited for it is not open any more, and the task its settlement promoted heads the
// reference now, locked in turn; each round follows a settlement, so it ends).
func lockedRetryState(ctx context.Context, tx *sql.Tx, ref string, hash uint32) ([]openTask, []int64, error) {
	locked := map[int64]bool{}
	for {
		heads, failed, err := readRetryState(ctx, tx, ref, hash)
		if err != nil {
			return nil, nil, err
		}
		var ids []int64
		for _, h := range heads {
			if !locked[h.id] {
				ids = append(ids, h.id)
			}
		}
		if len(ids) == 0 {
			return heads, failed, nil
		}
		slices.Sort(ids)
		q, args := mysql.ExpandIDs(queries.LockHeads, ids)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return nil, nil, err
		}
		for _, id := range ids {
			locked[id] = true
		}
	}
}

// readRetryState reads RetryStateOfReference: the reference's open tasks and its failed tasks' ids.
func readRetryState(ctx context.Context, tx *sql.Tx, ref string, hash uint32) ([]openTask, []int64, error) {
	rows, err := tx.QueryContext(ctx, retryQueries.RetryStateOfReference, hash, ref, hash, ref)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var heads []openTask
	var failed []int64
	for rows.Next() {
		var part int
		var t openTask
		if err := rows.Scan(&part, &t.id, &t.state, &t.pos); err != nil {
			return nil, nil, err
		}
		if part == 0 {
			heads = append(heads, t)
		} else {
			failed = append(failed, t.id)
		}
	}
	return heads, failed, rows.Err()
}
