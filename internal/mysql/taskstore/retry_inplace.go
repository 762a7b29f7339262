package taskstore

// A reference's failed tasks retried in their places (RetryReference's first choice, and a task's
// retry): decided and written before the bucket is taken, then checked again under it.

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/exactlyonce/exactlyonce"
)

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
// retried head, as it finds any head. With more failed tasks to come (more), the head is held.
//
// failedAt, not nil for a reference's retry, is its failed tasks as this transaction read them
// (RetryStateOfReference: the first 50,001 by position), by id, with their positions. Its question
// "has a later task started?" leaves out every failed task of the reference (all are retried, in
// this part or a later one): by their state, and those of failedAt whose directory entry is still
// at the position read are not asked about at all. Each TasksStarted statement of 500 ids reads
// every subpartition those ids fall in, so asking about the later tasks of a reference whose last
// 60,000 tasks failed took 120 statements and 2.4 s in the first part (on a loaded 2-core
// machine), past the API's 10 s under more load, where the call gives nothing back. A task of
// failedAt that is not failed any more was retried since the read: to the end (its entry has
// moved, so it is asked about), or in place (it is open, which the check under the bucket sees:
// the retry decides again). A task's retry (failedAt nil) counts the failed tasks.
func (s *Store) retryInPlaceFirst(ctx context.Context, tx *sql.Tx, ref string, hash uint32, failed []failedTask, folded int64, failedAt map[int64]int64, more bool) (exactlyonce.RetriedReference, bool, error) {
	c := cellOf(ref)
	cellBytes, err := readEntryBytes(ctx, tx, c)
	if err != nil {
		return exactlyonce.RetriedReference{}, false, err
	}
	decided := cellEntries(cellBytes, c.tag)
	bulk := failedAt != nil
	var known map[int64]bool
	if bulk {
		known = map[int64]bool{}
		for _, e := range decided {
			if p, ok := failedAt[e.id]; ok && p == e.position {
				known[e.id] = true
			}
		}
	}
	if s.onStartedAsked != nil {
		n := 0
		for _, e := range decided {
			if e.position > failed[0].position && !known[e.id] {
				n++
			}
		}
		s.onStartedAsked(n)
	}
	started, err := tasksStartedAfter(ctx, tx, decided, failed[0].position, known, bulk)
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
	if more {
		if err := s.holdRetried(ctx, tx, failed[0].id); err != nil {
			return exactlyonce.RetriedReference{}, false, err
		}
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
	// With more, Head names the head held (RetryReference answers it only once released).
	out := exactlyonce.RetriedReference{Placement: exactlyonce.RetryInPlace, Head: failed[0].id, More: more}
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
