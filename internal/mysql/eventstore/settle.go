package eventstore

// The ends of a claim's leases: its failures recorded (Fail, FailLeased), its results settled
// (Settle) and its events released (Release), each a short transaction guarded by the lease.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// maxErrorText bounds the error kept on an event: last_error is TEXT since migration 0015, and every
// writer keeps at most this many bytes of it (through ErrorText).
const maxErrorText = 1024

// ErrorText is text as an event keeps it for its last error: valid UTF-8, at most maxErrorText
// bytes.
func ErrorText(text string) string {
	text = strings.ToValidUTF8(text, "?")
	if len(text) > maxErrorText {
		text = strings.ToValidUTF8(text[:maxErrorText], "")
	}
	return text
}

// failed is the state, the wait and the error text a failure f writes.
func failed(f exactlyonce.Failure) (state exactlyonce.State, wait time.Duration, text string) {
	text = ErrorText(f.Err.Error())
	if f.Final {
		return exactlyonce.Failed, 0, text
	}
	return exactlyonce.Pending, f.Wait, text
}

// Fail records that the work of events leased to claim c failed, each as the engine decided
// (Failure), in one short transaction: each waits (pending again) or is failed for good. It returns
// those failed for good. An event whose lease was taken over is not touched.
func (s *Store) Fail(ctx context.Context, c exactlyonce.Claim, failures map[int64]exactlyonce.Failure) ([]int64, error) {
	if len(failures) == 0 {
		return nil, nil
	}
	var gaveUp []int64
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		gaveUp = gaveUp[:0]
		for id, f := range failures {
			state, wait, text := failed(f)
			res, err := FailLeased(ctx, tx, c, id, state, text, wait)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 && state == exactlyonce.Failed {
				gaveUp = append(gaveUp, id)
			}
		}
		return nil
	})
	if err != nil {
		return nil, mysql.Interpret("record failed work", err)
	}
	return gaveUp, nil
}

// FailLeased records, in tx, that the attempt of event id leased to claim c failed with text: the
// event is in state now (pending again, waiting wait, or failed for good), unless its lease was
// taken over (the result then says no row changed). FailLeased's statement, for Fail and for the
// settlement of tasks (taskstore).
func FailLeased(ctx context.Context, tx mysql.Conn, c exactlyonce.Claim, id int64, state exactlyonce.State, text string,
	wait time.Duration) (sql.Result, error) {
	return tx.ExecContext(ctx, queries.FailLeased, state, text, wait.Microseconds(), state, state, c.By, c.ID, c.ID, id)
}

// LockLeased locks those of ids (at most MarkChunk) still leased to claim claimID, in tx, and
// returns them: the first statements of every settlement of leased events, Settle's and the
// tasks'. Two statements: the lock (LockLeased, an UPDATE, which waits for no other claim's rows),
// then the read of what it locked (LeasedIDs).
func LockLeased(ctx context.Context, tx mysql.Conn, claimID string, ids []int64) ([]int64, error) {
	ids = mysql.Unique(ids)
	args, err := LockLeasedOnly(ctx, tx, claimID, ids)
	if err != nil {
		return nil, err
	}
	q, _ := mysql.ExpandIDs(queries.LeasedIDs, ids)
	return mysql.ScanIDs(tx.QueryContext(ctx, q, args...))
}

// LockLeasedOnly is LockLeased's first statement, for ids without duplicates: it locks which of
// them are still leased to claimID, and returns its arguments, which are LeasedIDs' too, for a
// caller that reads what it locked itself, joined to a read of its own in one round trip
// (taskstore's settlement, whose LeasedAndQueued begins as LeasedIDs).
func LockLeasedOnly(ctx context.Context, tx mysql.Conn, claimID string, ids []int64) ([]any, error) {
	q, args := mysql.ExpandIDs(queries.LockLeased, ids)
	args = append(append([]any{claimID}, args...), len(ids))
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return nil, err
	}
	return args, nil
}

// Settle settles events leased to claim claimID with their results, in one short transaction, and
// returns those it settled. An event missing from the answer was not settled because its lease was
// taken over (it expired and another claim took it) or it was settled already (by this claim
// too: settling twice settles nothing the second time): the guard on the lease holder makes a
// second settlement impossible.
func (s *Store) Settle(ctx context.Context, claimID, by string, results map[int64]exactlyonce.Result) ([]int64, error) {
	if len(results) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, len(results))
	values := make(map[int64]string, len(results))
	for id, r := range results {
		ids = append(ids, id)
		values[id] = r.Value
	}
	var settled []int64
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		settled = settled[:0]
		for rest := ids; len(rest) > 0; {
			chunk := rest[:min(len(rest), MarkChunk)]
			rest = rest[len(chunk):]
			held, err := LockLeased(ctx, tx, claimID, chunk)
			if err != nil || len(held) == 0 {
				return err
			}
			n, err := SetValues(ctx, tx, queries.SettleLeased, held, func(i int) string { return values[held[i]] },
				[]any{by, claimID})
			if err != nil {
				return err
			}
			if n != int64(len(held)) {
				return fmt.Errorf("settled %d rows for %d leased events", n, len(held))
			}
			settled = append(settled, held...)
		}
		return nil
	})
	if err != nil {
		return nil, mysql.Interpret("settle events", err)
	}
	return settled, nil
}

// Release gives events leased to claim claimID back, pending, so that they are claimable at once:
// their work failed, or could not finish before the claiming process's deadline. An event whose lease was
// taken over is not touched.
func (s *Store) Release(ctx context.Context, claimID string, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		for rest := ids; len(rest) > 0; {
			chunk := rest[:min(len(rest), MarkChunk)]
			rest = rest[len(chunk):]
			q, args := mysql.ExpandIDs(queries.Release, chunk)
			if _, err := tx.ExecContext(ctx, q, append([]any{claimID}, args...)...); err != nil {
				return err
			}
		}
		return nil
	})
	return mysql.Interpret("release events", err)
}
