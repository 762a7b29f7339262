package taskstore

// The rows a reference's bulk retry (retry_reference.go) locks, reads and writes: its failed tasks,
// locked first; the reference's open tasks (heads) and failed ids, read under its bucket; the
// batched RetryTasks. retry_reference.go and retry_places.go decide; these statements are in retry.sql.

import (
	"context"
	"database/sql"
	"errors"
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
	folded       bool // state 40: counted in settled_count, which its retry takes back (UncountRetried)
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
			f.folded = true
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
	LaterUnfailedTaskStarted, LockFrontier, FrontierOf                                                                         string
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

// retryState is what RetryStateOfReference reads of a reference: its open tasks (heads), the ids
// of its first failed tasks in position order, their positions (by id), and the queued frontier a
// retry to the end behind an open task holds (HoldRetried), if any.
type retryState struct {
	heads    []openTask
	failed   []int64
	at       map[int64]int64
	frontier *openTask
}

// lockedRetryState locks the open tasks (heads) of reference ref, whose bucket tx holds, and
// returns them as they are once locked, with the ids of the reference's failed tasks read then, in
// position order (RetryStateOfReference, read again after each LockHeads: a head settled while
// LockHeads waited for it is not open any more, and the task its settlement promoted heads the
// reference now, locked in turn; each round follows a settlement, so it ends), and its held
// frontier (not locked: the caller locks it, LockFrontier, and reads it again).
func lockedRetryState(ctx context.Context, tx *sql.Tx, ref string, hash uint32, limit int) (retryState, error) {
	locked := map[int64]bool{}
	for {
		st, err := readRetryStateAt(ctx, tx, ref, hash, limit)
		if err != nil {
			return retryState{}, err
		}
		var ids []int64
		for _, h := range st.heads {
			if !locked[h.id] {
				ids = append(ids, h.id)
			}
		}
		if len(ids) == 0 {
			return st, nil
		}
		slices.Sort(ids)
		q, args := mysql.ExpandIDs(queries.LockHeads, ids)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return retryState{}, err
		}
		for _, id := range ids {
			locked[id] = true
		}
	}
}

// readRetryStateAt reads RetryStateOfReference: the reference's open tasks, its first limit+1
// failed tasks (0: all), in position order, with their positions, and its held frontier.
func readRetryStateAt(ctx context.Context, tx *sql.Tx, ref string, hash uint32, limit int) (retryState, error) {
	n := int64(wholeLimit)
	if limit > 0 {
		n = int64(limit) + 1
	}
	rows, err := tx.QueryContext(ctx, retryQueries.RetryStateOfReference, hash, ref, hash, ref, n, hash, ref)
	if err != nil {
		return retryState{}, err
	}
	defer rows.Close()
	st := retryState{at: map[int64]int64{}}
	for rows.Next() {
		var part int
		var t openTask
		if err := rows.Scan(&part, &t.id, &t.state, &t.pos, &t.held); err != nil {
			return retryState{}, err
		}
		switch part {
		case 0:
			st.heads = append(st.heads, t)
		case 1:
			st.failed = append(st.failed, t.id)
			st.at[t.id] = t.pos
		default:
			// One retry at a time holds a frontier (its parts run under the bucket, and a later
			// one continues the frontier it finds); two would be a bug, answered as an error
			// rather than guessed at, and gone within the hold (30 s) if it ever happened.
			if st.frontier != nil {
				return retryState{}, fmt.Errorf("reference %q has two held frontiers, %d and %d", ref, st.frontier.id, t.id)
			}
			st.frontier = &t
		}
	}
	return st, rows.Err()
}

// lockFrontier locks task id, a frontier a retry to the end behind an open task held
// (LockFrontier), and reads it again (FrontierOf): nil if it is not open or queued any more, or
// not held.
func lockFrontier(ctx context.Context, tx *sql.Tx, id int64) (*openTask, error) {
	if _, err := tx.ExecContext(ctx, retryQueries.LockFrontier, id); err != nil {
		return nil, err
	}
	return frontierOf(ctx, tx, id)
}

// frontierOf reads FrontierOf: task id if it is open or queued and held, else nil.
func frontierOf(ctx context.Context, tx *sql.Tx, id int64) (*openTask, error) {
	var t openTask
	err := tx.QueryRowContext(ctx, retryQueries.FrontierOf, id).Scan(&t.id, &t.state, &t.pos, &t.held)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !t.held) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &t, nil
}
