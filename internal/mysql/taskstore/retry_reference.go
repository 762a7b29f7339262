package taskstore

// The bulk retry of a reference's failed tasks (POST /references/{referenceId}/retry). The
// statements are in tasks.sql.

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// RetryReference gives every failed task of reference ref a fresh retry budget, in their order,
// by RetryTask's rules applied to them as one: they go back in their places if no task of the
// reference after the first of them has started (but the failed ones themselves), and no task of
// the reference is open before it; else all to the end of the reference's queue, in their order,
// behind the task open now. Either way only one task of the reference is open (its head) and the
// others are queued, in position order. A reference with no failed task is left as it is (no task
// retried, no error).
//
// It goes in parts: a transaction retries at most retryPart of the failed tasks (the earliest by
// position), so that each holds the reference's bucket briefly whatever the reference holds
// (before, one transaction retried them all: 2,000 took 0.33 s, and some 50,000 passed the API's
// 10 s timeout, rolled back each time). The first part decides, as the one transaction did, where
// they all go; if more remain, it holds the head it made (HoldRetried: pending but not due), so
// that the reference delivers nothing and a create of it queues behind, as behind the whole retry,
// and, for a retry to the end, it takes a position from the bucket for every failed task, so that
// a create between parts takes its positions after them all. A later part finds the held head and
// continues the decision (continueRetry); the last releases it. Parts run until none remains, the
// time budget (retryBudget) is spent, or the answer would pass maxRetriedAnswer ids: then More
// says so and the caller calls again, which continues. A retry that stops between parts (its
// process killed) lost nothing (each part is one transaction) and the next call continues; if
// none comes, the hold ends by itself (retryHold) and the reference goes on with the rest still
// failed, which a later retry decides afresh.
//
// A retry to the end behind a task open now goes in parts too: that task cannot be held (it is
// processing, or waits a backoff), so the first part holds its frontier instead, the last task it
// placed, queued (HoldRetried), which a settlement promotes pending with its hold kept and never
// leases (QueuedOfReferences, PromoteQueued): the reference delivers up to it, nothing behind it,
// until the last part releases it. Later parts find it (RetryStateOfReference, or by id: FrontierOf)
// and place theirs after it (continueRetryFrontier, continueRetry); tasks that failed after the
// retry began take no place of the others (continueRetry's fit: the retry ends and they are decided
// afresh). Before, this case was one transaction of every failed task (20,000 took 1.9 to 7.8 s
// under the bucket on a loaded machine). A retry while the directory of a database
// migrated with tasks in it is not complete goes in parts too, its first part deciding by the scan
// (laterUnfailedStarted). A call reads the failed set once (knownFailed); a part whose failed tasks
// someone else retried first ends empty, with More (errRetriedMeanwhile).
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
	size, budget := s.retryPartSize(), cmp.Or(s.retryBudget, defaultRetryBudget)
	start := time.Now()
	out := exactlyonce.RetriedReference{IDs: []int64{}}
	var known knownFailed // the reference's failed tasks as this call read them once
	var released int64    // a pending frontier a part released, ending its retry (knownFailed)
	for n := 1; ; n++ {
		if s.beforeRetryPart != nil {
			if err := s.beforeRetryPart(n); err != nil {
				return exactlyonce.RetriedReference{}, mysql.Interpret("retry reference", err)
			}
		}
		p, err := s.retryReferencePart(ctx, ref, hash, size, &known)
		if err != nil {
			return exactlyonce.RetriedReference{}, mysql.Interpret("retry reference", err)
		}
		if known.released != 0 {
			released, known.released = known.released, 0
		}
		out.IDs = append(out.IDs, p.IDs...)
		out.Placement = cmp.Or(out.Placement, p.Placement)
		// A part that leaves more names the head it holds (for the next part's check, known); the
		// answer names a head only once released (its queue message goes then).
		known.held = 0
		if p.More {
			known.held = p.Head
		} else if p.Head != 0 {
			out.Head = p.Head
		}
		out.More = p.More
		if !p.More || time.Since(start) >= budget || len(out.IDs)+size > maxRetriedAnswer || ctx.Err() != nil {
			if out.Head == 0 {
				out.Head = released
			}
			return out, nil
		}
	}
}

const (
	// defaultRetryPart is the most failed tasks one part retries: about 80 ms of writes under the
	// bucket (2,000 took 0.33 s), its statements 200 tasks each (RetryTasks, about 6 KB).
	defaultRetryPart = 500
	// defaultRetryHold is how long a part holds the head it made: far more than the time between
	// two parts, or two calls of a caller that follows More, and short enough that a reference
	// whose retry stopped goes on soon.
	defaultRetryHold = 30 * time.Second
	// defaultRetryBudget is how long one call runs parts: half the API function's 10 s timeout, so
	// the last part, begun before the budget ends, commits well before it.
	defaultRetryBudget = 5 * time.Second
	// maxRetriedAnswer bounds the ids one call answers (at most about 650 KB of JSON, far under
	// Lambda's 6 MB answer).
	maxRetriedAnswer = 50000
	// wholeLimit is the LIMIT of a retry that goes whole: no reference has that many failed tasks.
	wholeLimit = 1 << 62
)

func (s *Store) retryPartSize() int { return cmp.Or(s.retryPart, defaultRetryPart) }

// RetryParts sizes s's bulk retries: size failed tasks a part, parts for up to budget a call (0:
// the defaults, 500 and 5 s). For tests and the benchmark, which make a reference of a few failed
// tasks take several parts; called before the first RetryReference.
func (s *Store) RetryParts(size int, budget time.Duration) {
	s.retryPart, s.retryBudget = size, budget
}

// knownFailed is what one call of RetryReference knows of the reference's failed tasks between its
// parts: ids, the failed tasks not retried yet, in position order, as its first read found them
// (up to maxRetriedAnswer+1 of them: all the call can retry, and one to tell more; complete if
// that was all of them), and held, the head its last part holds (0: none). A later part of the
// call takes its tasks from ids rather than reading the failed set again, which is a scan of the
// reference's whole failed set (60,000 failed tasks: 60,000 rows read for each part of 500).
//
// Why ids is still right at the next part: a task of the reference fails only from open, and
// once a part leaves more its held head is the reference's only open task (continueRetryHeld
// checks it under the bucket), which no claim starts; so while the head the part reads is that
// one and still held, no task of the reference has failed since, and the earliest failed tasks
// are ids' first. Tasks may have left the failed set (a task's retry, another caller's part of the
// same retry: lockFailedTasks finds them not failed, errRetriedMeanwhile, and the call reads the
// set again). Any other head, or none, or a head not held: the part reads the set again.
//
// released is a pending frontier a part released before the retry's last part, ending it
// (writeRetry: tasks that failed since it began are decided afresh): due now, its queue message is
// sent with the call's answer, which names it as its head if no later part made one.
type knownFailed struct {
	ids      []int64
	complete bool
	held     int64
	released int64
}

// retryReferencePart is one part of RetryReference: one transaction, run again (the bucket taken
// first) if the reference changed while it decided, or whole if its case does not go in parts.
// known is what the call knows of the failed set (knownFailed); the part updates it.
func (s *Store) retryReferencePart(ctx context.Context, ref string, hash uint32, size int, known *knownFailed) (exactlyonce.RetriedReference, error) {
	var out exactlyonce.RetriedReference
	first, limit := true, size
	for round := 1; ; round++ {
		next := *known
		err := s.core.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			next = *known
			out, err = s.retryReference(ctx, tx, ref, hash, first, limit, &next)
			return err
		})
		if err == nil {
			*known = next
		} else {
			*known = knownFailed{} // read the failed set again
		}
		if errors.Is(err, errRetriedMeanwhile) {
			// Someone else retried some of the tasks this part locked (another caller's part,
			// or a task's retry): progress, not a change to decide against. The part ends with
			// nothing of its own and More, and RetryReference's next part reads the reference
			// again, within its time budget; two callers racing part for part did count it as
			// a round, and the loser ran out of rounds and answered an error
			// (TestTwoRetriesInPartsOfOneReferenceAtOnceBothFinish).
			return exactlyonce.RetriedReference{IDs: []int64{}, More: true}, nil
		}
		if errors.Is(err, errReferenceMoved) && round < maxRetryRounds {
			first = false // the next transaction takes the bucket before it decides
			continue
		}
		if err != nil {
			return exactlyonce.RetriedReference{}, err
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

// errRetriedMeanwhile is a bulk retry's transaction giving up because a failed task it read was
// retried by someone else before it could lock it (lockFailedTasks): the reference's failed set
// shrank, so it is not counted as a round (retryReferencePart).
var errRetriedMeanwhile = errors.New("a failed task of the reference was retried meanwhile")

const maxRetryRounds = 10

// retryReference is one transaction of RetryReference: the reference's heads and (up to limit+1;
// 0: all) failed tasks read (no lock), the failed tasks locked, then either retryInPlaceFirst
// (optimistic, and the case allows it) or retryReferenceLocked.
//
// known is what the call knows of the failed set (knownFailed): a later part whose head is still
// the one the last part held takes its failed tasks from it and reads only the reference's open
// tasks; any other reads the failed set (up to maxRetriedAnswer+1 in parts) and keeps what it
// does not retry in known.
func (s *Store) retryReference(ctx context.Context, tx *sql.Tx, ref string, hash uint32, optimistic bool, limit int, known *knownFailed) (exactlyonce.RetriedReference, error) {
	done, err := s.directoryComplete(ctx, tx)
	if err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	var heads []openTask
	var ids []int64
	var failedAt map[int64]int64 // the failed tasks read in this transaction, and their positions
	var frontier *openTask       // the queued frontier of a retry to the end behind an open task
	fromKnown := false
	if optimistic && limit > 0 && known.held != 0 && (known.complete || len(known.ids) > limit) {
		if heads, err = openOfReference(ctx, tx, ref, hash); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
		if h := heldHead(heads); h != nil && h.id == known.held {
			ids, fromKnown = known.ids[:min(len(known.ids), limit+1)], true
		} else if f, err := frontierOf(ctx, tx, known.held); err != nil {
			return exactlyonce.RetriedReference{}, err
		} else if f != nil && f.state == exactlyonce.Queued {
			// The frontier the last part held, still queued and held: nothing behind it was
			// promoted, so the failed tasks the call read and has not retried are still the ones
			// this retry places after it (tasks that failed since, the open task among them, are
			// not in ids: a later call's read finds them; knownFailed).
			ids, fromKnown, frontier = known.ids[:min(len(known.ids), limit+1)], true, f
		}
	}
	if !fromKnown {
		n := limit
		if limit > 0 {
			n = max(limit, maxRetriedAnswer)
		}
		st, err := readRetryStateAt(ctx, tx, ref, hash, n)
		if err != nil {
			return exactlyonce.RetriedReference{}, err
		}
		heads, ids, failedAt, frontier = st.heads, st.failed, st.at, st.frontier
		if s.onFailedSetRead != nil {
			s.onFailedSetRead()
		}
		if s.afterFailedSetRead != nil {
			s.afterFailedSetRead()
		}
		*known = knownFailed{ids: ids, complete: limit > 0 && len(ids) <= n}
		ids = ids[:min(len(ids), limit+1)]
		if limit == 0 {
			ids = known.ids
		}
	}
	more := limit > 0 && len(ids) > limit
	if more {
		ids = ids[:limit]
	}
	known.ids = known.ids[len(ids):] // those this part retries, if it commits
	if len(ids) == 0 && heldHead(heads) == nil && frontier == nil {
		return exactlyonce.RetriedReference{}, nil
	}
	var failed []failedTask
	var folded int64
	if len(ids) > 0 {
		if failed, folded, err = lockFailedTasks(ctx, tx, ids); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
	}
	if h := heldHead(heads); h != nil && optimistic {
		return s.continueRetryHeld(ctx, tx, ref, hash, failed, folded, *h, more, known)
	}
	if frontier != nil && optimistic {
		return s.continueRetryFrontier(ctx, tx, ref, hash, failed, folded, frontier.id, more, known)
	}
	if optimistic && len(heads) == 0 && done {
		out, ok, err := s.retryInPlaceFirst(ctx, tx, ref, hash, failed, folded, failedAt, more)
		if err != nil || ok {
			return out, err
		}
	}
	return s.retryReferenceLocked(ctx, tx, ref, hash, failed, folded, limit, known)
}

// heldHead is the reference's open task if it is its only one and a bulk retry's held head (a
// retry in parts under way), else nil.
func heldHead(heads []openTask) *openTask {
	if len(heads) == 1 && heads[0].held {
		return &heads[0]
	}
	return nil
}

// pendingID is h's id if it is pending (a head whose queue message the API sends once it is
// released), else 0 (a frontier still queued: promoted in its turn).
func pendingID(h *openTask) int64 {
	if h.state == exactlyonce.Pending {
		return h.id
	}
	return 0
}

// holdRetried holds head id until a later part (HoldRetried).
func (s *Store) holdRetried(ctx context.Context, tx *sql.Tx, id int64) error {
	res, err := tx.ExecContext(ctx, retryQueries.HoldRetried, cmp.Or(s.retryHold, defaultRetryHold).Microseconds(), id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		return fmt.Errorf("held %d rows for the retried head %d", n, id)
	}
	return nil
}

// retryReferenceLocked retries the locked failed tasks of reference ref with its bucket and heads
// held while it decides: the bucket, then the heads (read and locked until every head read is
// held), then the failed tasks read again (up to limit+1; 0: all), whose first must be the ones
// locked (a task of the reference that failed since the first read was not locked first:
// errReferenceMoved, and the next round locks it with the others). A held head (a retry in parts
// under way) continues its decision (continueRetry); else placeRetries decides afresh.
func (s *Store) retryReferenceLocked(ctx context.Context, tx *sql.Tx, ref string, hash uint32, failed []failedTask, folded int64, limit int, known *knownFailed) (exactlyonce.RetriedReference, error) {
	if err := lockTaskBucketsOnly(ctx, tx, []int64{taskBucket(hash)}); err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	st, err := lockedRetryState(ctx, tx, ref, hash, limit)
	if err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	heads, ids := st.heads, st.failed
	more := limit > 0 && len(ids) > limit
	if more {
		ids = ids[:limit]
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
	held := heldHead(heads)
	if held == nil && st.frontier != nil {
		// A retry to the end behind an open task under way: its frontier, locked and read again,
		// must still be held, else the reference moved on (its hold ended) and the next round
		// decides afresh.
		if held, err = lockFrontier(ctx, tx, st.frontier.id); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
		if held == nil {
			return exactlyonce.RetriedReference{}, errReferenceMoved
		}
	}
	return s.writeRetry(ctx, tx, ref, hash, failed, folded, held, heads, limit > 0, more, known)
}

// writeRetry places the locked failed tasks (continueRetry, after the held head of a retry in
// parts, else placeRetries) and writes them, holding the head the retry made while more remain,
// releasing it at the last part, with their directory entries (to the end) and settled_count.
func (s *Store) writeRetry(ctx context.Context, tx *sql.Tx, ref string, hash uint32, failed []failedTask, folded int64, held *openTask, heads []openTask, parts, more bool, known *knownFailed) (exactlyonce.RetriedReference, error) {
	if len(failed) == 0 {
		// No failed task left, and a held head: its retry's last tasks were retried one by one
		// meanwhile. It is released, as its last part would have.
		if held == nil {
			return exactlyonce.RetriedReference{}, nil
		}
		if _, err := tx.ExecContext(ctx, retryQueries.ReleaseRetried, held.id); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
		return exactlyonce.RetriedReference{Head: pendingID(held)}, nil
	}
	var place retryPlaces
	var err error
	ends := false // the retry ends with this part, failed tasks left (they failed since it began)
	if held != nil {
		var fit int
		place, fit, err = continueRetry(ctx, tx, ref, failed, *held)
		if err == nil && fit < len(failed) {
			// Tasks that failed after the retry began do not fit in the places its first part
			// took for the tasks it began with: those that fit (the first by position, which
			// are the latter's) are placed, and the retry ends here, its frontier released; the
			// next part decides afresh for the rest, to the end behind every task of the
			// reference.
			failed, ends, more = failed[:fit], true, true
			folded = 0
			for _, f := range failed {
				if f.folded {
					folded++
				}
			}
		}
	} else {
		place, err = s.placeRetries(ctx, tx, ref, hash, failed, heads, parts, more)
	}
	if err != nil {
		return exactlyonce.RetriedReference{}, err
	}
	if len(failed) > 0 {
		if err := retryTasks(ctx, tx, failed, place); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
	}
	out := exactlyonce.RetriedReference{More: more}
	var holder int64 // the head this retry made, held until its last part
	if held != nil {
		holder = held.id
	}
	for i, f := range failed {
		out.IDs = append(out.IDs, f.id)
		if place.states[i] == exactlyonce.Pending {
			holder = f.id
		}
	}
	switch {
	case ends:
		if _, err := tx.ExecContext(ctx, retryQueries.ReleaseRetried, holder); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
		known.released = pendingID(held) // the call's answer names it: its queue message goes
	case more:
		if holder == 0 {
			// A first part to the end behind an open task, which it cannot hold: it holds its
			// frontier, its last task (queued), which no promotion passes while held
			// (HoldRetried), and its later parts place theirs after it.
			holder = failed[len(failed)-1].id
		}
		if err := s.holdRetried(ctx, tx, holder); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
		out.Head = holder // held: RetryReference answers it only once released
	case held != nil:
		if _, err := tx.ExecContext(ctx, retryQueries.ReleaseRetried, holder); err != nil {
			return exactlyonce.RetriedReference{}, err
		}
		out.Head = pendingID(held) // a frontier still queued has no queue message to send
	default:
		out.Head = holder
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
