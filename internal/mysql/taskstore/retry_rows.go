package taskstore

// The rows a reference's bulk retry (retry_reference.go) locks, reads and writes: its failed tasks,
// locked first; the reference's open tasks (heads) and failed ids, read under its bucket; the
// batched RetryTasks. retry_reference.go and retry_places.go decide; these statements are in retry.sql.

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
)

// failedTask is a failed task locked for a retry.
type failedTask struct {
	id, position int64
}

// lockFailedTasks locks the failed tasks ids (LockFailedTasks) and returns them in position order,
// with how many of them were folded (state 40). A task of ids that is not failed any more was
// retried since it was read (a fold moves a failed task from 20 to 40, which LockFailedTasks still
// reads), by a task's retry or another caller's bulk retry of the reference: errRetriedMeanwhile,
// and the retry reads the reference again (retryReferencePart).
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
		return nil, 0, errRetriedMeanwhile
	}
	return out, folded, nil
}

// retryTexts are the statements of retry.sql.
type retryTexts struct {
	RetryTasks, RetryStateOfReference, OpenOfReference, CountFailedOfReference, HoldRetried, ReleaseRetried, RetryInPlaceCheck string
	LaterUnfailedTaskStarted                                                                                                   string
}

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
	held  bool // a bulk retry's held head (RetryStateOfReference)
}

// lockedRetryState locks the open tasks (heads) of reference ref, whose bucket tx holds, and
// returns them as they are once locked, with the ids of the reference's failed tasks read then, in
// position order (RetryStateOfReference, read again after each LockHeads: a head settled while
// LockHeads waited for it is not open any more, and the task its settlement promoted heads the
// reference now, locked in turn; each round follows a settlement, so it ends).
func lockedRetryState(ctx context.Context, tx *sql.Tx, ref string, hash uint32, limit int) ([]openTask, []int64, error) {
	locked := map[int64]bool{}
	for {
		heads, failed, err := readRetryState(ctx, tx, ref, hash, limit)
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

// readRetryState reads RetryStateOfReference: the reference's open tasks and its first limit+1
// failed tasks' ids (0: all), in position order.
func readRetryState(ctx context.Context, tx *sql.Tx, ref string, hash uint32, limit int) ([]openTask, []int64, error) {
	heads, failed, _, err := readRetryStateAt(ctx, tx, ref, hash, limit)
	return heads, failed, err
}

// readRetryStateAt is readRetryState with the failed tasks' positions (at, by id).
func readRetryStateAt(ctx context.Context, tx *sql.Tx, ref string, hash uint32, limit int) ([]openTask, []int64, map[int64]int64, error) {
	n := int64(wholeLimit)
	if limit > 0 {
		n = int64(limit) + 1
	}
	rows, err := tx.QueryContext(ctx, retryQueries.RetryStateOfReference, hash, ref, hash, ref, n)
	if err != nil {
		return nil, nil, nil, err
	}
	defer rows.Close()
	var heads []openTask
	var failed []int64
	at := map[int64]int64{}
	for rows.Next() {
		var part int
		var t openTask
		if err := rows.Scan(&part, &t.id, &t.state, &t.pos, &t.held); err != nil {
			return nil, nil, nil, err
		}
		if part == 0 {
			heads = append(heads, t)
		} else {
			failed = append(failed, t.id)
			at[t.id] = t.pos
		}
	}
	return heads, failed, at, rows.Err()
}
