package taskstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/agentstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
)

// SettleTasks records, in one short transaction, the outcomes of delivery attempts of tasks leased
// to claim c, and for each reference whose task settled, hands the reference on to its next queued
// task: pending, or, with chain, leased to c (returned in Next). Each outcome is written only if
// the task is still leased to c (the guard of every settlement), with its attempt.
//
// The next task joins the event worker of the task it follows if that worker has room; behind a
// full one (willTerminate) it joins none, and the EventService of whoever delivers it gives it one
// with room (a task in Next has no WorkerID then), so that a full worker takes no new task and is
// done once its own have settled.
func (s *Store) SettleTasks(ctx context.Context, c exactlyonce.Claim, outcomes []exactlyonce.TaskOutcome, chain bool) (exactlyonce.TaskSettlement, error) {
	return s.SettleTasksDrafting(ctx, c, outcomes, chain, nil)
}

// SettleTasksDrafting is SettleTasks, and, when it chains with draft set, gives the tasks it hands on
// to c behind an event worker with no room (or none) the event workers that draft's EventService
// drafts for them, in the settlement's transaction (agentstore.WriteDraft, and the promotion names
// each task's worker): a task in Next then has its WorkerID, and the claim needs no assignment's
// transaction of its own for it. A drafted growth of a worker that is not draft.Agent's live worker
// with room rolls the whole settlement back with a *exactlyonce.WorkerConflictError naming it.
func (s *Store) SettleTasksDrafting(ctx context.Context, c exactlyonce.Claim, outcomes []exactlyonce.TaskOutcome, chain bool,
	draft *exactlyonce.DraftWorkers) (exactlyonce.TaskSettlement, error) {
	var out exactlyonce.TaskSettlement
	if len(outcomes) == 0 {
		return out, nil
	}
	ids := make([]int64, len(outcomes))
	outcomeRefs := map[string]uint32{}
	for i, o := range outcomes {
		ids[i] = o.Event.ID
		if t := o.Event.Task; t != nil && t.ReferenceID != "" {
			outcomeRefs[t.ReferenceID] = t.Hash
		}
	}
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		out = exactlyonce.TaskSettlement{}
		// The tasks still leased to c, locked: a create queueing behind one of them holds it until
		// it commits (LockHeads), so the promotion below sees its task.
		held := map[int64]bool{}
		// One chunk with references (every settlement of the tasks benchmark): the read of what
		// LockLeased locked carries the read of the references' queues (LeasedAndQueued), one round
		// trip fewer; queued holds its answer, filtered below to the references handed on.
		var queued []queuedRow
		joined := len(ids) <= eventstore.MarkChunk && len(outcomeRefs) > 0
		if joined {
			got, q, err := lockLeasedAndQueued(ctx, tx, c.ID, ids, outcomeRefs)
			if err != nil {
				return err
			}
			for _, id := range got {
				held[id] = true
			}
			queued = q
		}
		for rest := ids; len(rest) > 0 && !joined; {
			chunk := rest[:min(len(rest), eventstore.MarkChunk)]
			rest = rest[len(chunk):]
			got, err := eventstore.LockLeased(ctx, tx, c.ID, chunk)
			if err != nil {
				return err
			}
			for _, id := range got {
				held[id] = true
			}
		}
		values := map[int64]string{}
		var completed []int64
		settledRefs := map[string]uint32{}
		books := agentstore.WorkerBooks{}
		refWorker := map[string]string{}
		var attempts []exactlyonce.TaskOutcome
		for _, o := range outcomes {
			id := o.Event.ID
			if !held[id] {
				continue
			}
			delete(held, id) // an id given twice is written once
			attempts = append(attempts, o)
			if o.Delivered {
				values[id] = "HTTP " + strconv.Itoa(o.Attempt.Status)
				completed = append(completed, id)
				books.Completed(o.Event, id)
			} else {
				state, wait := exactlyonce.Pending, o.Wait
				if o.Final {
					state, wait = exactlyonce.Failed, 0
				}
				text := eventstore.ErrorText(o.Attempt.Error)
				if _, err := eventstore.FailLeased(ctx, tx, c, id, state, text, wait); err != nil {
					return err
				}
				if !o.Final {
					out.Retrying = append(out.Retrying, id)
					continue
				}
				out.GaveUp = append(out.GaveUp, id)
				books.Failed(o.Event)
			}
			if t := o.Event.Task; t != nil && t.ReferenceID != "" {
				settledRefs[t.ReferenceID] = t.Hash
				if t.WorkerID != "" {
					refWorker[t.ReferenceID] = t.WorkerID
				}
			}
		}
		if err := insertAttempts(ctx, tx, c.ID, attempts); err != nil {
			return err
		}
		// The next task of each reference settled, read with its head locked (LockLeased above).
		first := firstOf(queued, settledRefs)
		if !joined {
			var err error
			if first, err = queuedFirst(ctx, tx, settledRefs); err != nil {
				return err
			}
		}
		// Which of the heads' workers have room for the tasks promoted behind them is decided on
		// their rows under SettleWorkers' lock. A worker the settling EventService knows to be full
		// takes none of them (DraftWorkers.Room): it is not counted as promoting, and the tasks behind
		// it are drafted as behind any worker with no room. The promotion itself checks the room of
		// the others (guarded), unless a draft must know it first: then only the guess of the
		// EventService's own workers is checked there, and the room of workers not its own is read
		// before the draft (WorkersWithRoom). In the tasks benchmark's drains that read was a
		// statement in every settlement.
		mustRead := map[string]bool{}
		for ref := range first {
			w := refWorker[ref]
			if w == "" {
				continue
			}
			room, known := draftRoom(draft, w)
			if known && !room {
				continue
			}
			books.Promoting(w)
			if chain && draft != nil && !known {
				mustRead[w] = true
			}
		}
		// The event workers' counts change here, in the transaction that settles their tasks, and
		// this statement locks their rows: whether each has room for the task promoted behind its
		// head is decided on its row under that lock, and read back for the promotion.
		if err := books.Write(ctx, tx); err != nil {
			return err
		}
		// The completed tasks take their processed_at only now, under their event workers' row locks:
		// two settlements of one event worker's tasks then stamp them in the order they write its last
		// completed task, which is therefore the one completed last (verify.WorkerBooks). Stamped
		// before the lock, a settlement that waited for it could stamp earlier and write later.
		for rest := completed; len(rest) > 0; {
			chunk := rest[:min(len(rest), eventstore.MarkChunk)]
			rest = rest[len(chunk):]
			n, err := eventstore.SetValues(ctx, tx, queries.SettleLeasedTasks, chunk,
				func(i int) string { return values[chunk[i]] }, []any{c.By, c.ID})
			if err != nil {
				return err
			}
			if n != int64(len(chunk)) {
				return fmt.Errorf("settled %d rows for %d leased tasks", n, len(chunk))
			}
		}
		out.Completed = completed
		room, err := books.WithRoom(ctx, tx, func(w string) bool { return mustRead[w] })
		if err != nil {
			return err
		}
		// workerOf names each promoted task's worker as it is known now; guarded those whose worker's
		// room the promotion checks (PromoteQueued's /*worker*/).
		workerOf, guarded := map[int64]string{}, map[int64]string{}
		for ref, h := range first {
			w := refWorker[ref]
			if w == "" {
				continue
			}
			if r, known := draftRoom(draft, w); known && !r {
				continue
			}
			switch {
			case room[w]:
				workerOf[h.id] = w
			case !mustRead[w]:
				workerOf[h.id] = w
				guarded[h.id] = w
			}
		}
		// A bulk retry's held frontier is promoted pending, keeping its hold, and not handed on to
		// this claim (QueuedOfReferences): the reference delivers nothing past it until the retry's
		// next part moves on or the hold ends.
		heldFirst, handed := map[string]queuedTask{}, map[string]queuedTask{}
		for ref, h := range first {
			if h.held {
				heldFirst[ref] = h
			} else {
				handed[ref] = h
			}
		}
		if chain && draft != nil {
			// The tasks handed on behind a worker with no room join the workers drafted for them,
			// written here, after the heads' workers (SettleWorkers): see WriteDraft's lock order.
			grown, err := writeDraft(ctx, tx, draft, handed, settledRefs, workerOf)
			if err != nil {
				return err
			}
			// A guessed room the draft grew is certain: GrowWorkers grows only a live worker of this
			// agent with room, and this transaction has held the worker's row since SettleWorkers, so
			// it had room there. Checked in the promotion it would be read after its growth, which may
			// have filled it.
			for id, w := range guarded {
				if grown[w] {
					delete(guarded, id)
				}
			}
		}
		if _, err := promote(ctx, tx, c, heldFirst, workerOf, guarded, false); err != nil {
			return err
		}
		out.Next, err = promote(ctx, tx, c, handed, workerOf, guarded, chain)
		if err != nil || !chain || draft == nil {
			return err
		}
		// A guessed room the promotion found gone (the worker was adopted, and filled, by another
		// agent): its task joined none. Rolled back and run again without the guess, so that the
		// task is drafted in this transaction, as behind any worker with no room. (A held frontier,
		// promoted pending, that found it gone joins none, as behind any full worker, and is given
		// one by the claim that delivers it.)
		for _, n := range out.Next {
			if w, ok := guarded[n.ID]; ok && (n.Task == nil || n.Task.WorkerID == "") {
				return &exactlyonce.WorkerConflictError{WorkerID: w}
			}
		}
		return nil
	})
	var conflict *exactlyonce.WorkerConflictError
	if errors.As(err, &conflict) {
		return exactlyonce.TaskSettlement{}, conflict
	}
	if err != nil {
		return exactlyonce.TaskSettlement{}, mysql.Interpret("settle tasks", err)
	}
	return out, nil
}

// draftRoom is what draft's EventService knows of worker w's room (DraftWorkers.Room).
func draftRoom(draft *exactlyonce.DraftWorkers, w string) (room, known bool) {
	if draft == nil || draft.Room == nil {
		return false, false
	}
	return draft.Room(w)
}

// writeDraft has draft's EventService draft the event workers of the promoted tasks (first) that
// join none of their heads' (workerOf), writes the draft in tx, and adds the drafted workers to
// workerOf for the promotion. It returns the workers the draft grew.
func writeDraft(ctx context.Context, tx *sql.Tx, draft *exactlyonce.DraftWorkers, first map[string]queuedTask,
	hashes map[string]uint32, workerOf map[int64]string) (map[string]bool, error) {
	var bare []exactlyonce.Event
	for ref, h := range first {
		if _, ok := workerOf[h.id]; !ok {
			bare = append(bare, exactlyonce.Event{ID: h.id, Kind: exactlyonce.KindTask,
				Task: &exactlyonce.Task{ReferenceID: ref, Hash: hashes[ref]}})
		}
	}
	// Drafted even when there is none: the draft is called once in every run of the transaction,
	// so that the last call is the one that commits.
	slices.SortFunc(bare, func(x, y exactlyonce.Event) int { return cmp.Compare(x.ID, y.ID) })
	a := draft.Draft(bare)
	if err := agentstore.WriteDraft(ctx, tx, draft.Agent, a); err != nil {
		return nil, err
	}
	for w, ids := range a.Tasks {
		for _, id := range ids {
			workerOf[id] = w
		}
	}
	grown := map[string]bool{}
	for _, g := range a.Grow {
		grown[g.ID] = true
	}
	return grown, nil
}

func insertAttempts(ctx context.Context, tx *sql.Tx, claimID string, outcomes []exactlyonce.TaskOutcome) error {
	for rest := outcomes; len(rest) > 0; {
		chunk := rest[:min(len(rest), eventstore.MarkChunk)]
		rest = rest[len(chunk):]
		args := make([]any, 0, 7*len(chunk))
		for _, o := range chunk {
			a := o.Attempt
			var text sql.NullString
			if a.Error != "" {
				text = sql.NullString{String: eventstore.ErrorText(a.Error), Valid: true}
			}
			args = append(args, o.Event.ID, a.Number, a.Started.UTC(), a.Duration.Microseconds(), a.Status, text, claimID)
		}
		q := strings.Replace(queries.InsertAttempts, "/*rows*/",
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?), ", len(chunk)), ", "), 1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// queuedTask is a reference's first queued task: the one its settlement promotes; held if it is a
// bulk retry's held frontier (promoted pending, keeping its hold, never leased: QueuedOfReferences).
type queuedTask struct {
	id, pos int64
	held    bool
}

// queuedFirst reads the first queued task (the lowest position) of each of the references, in the
// transaction that settled the references' heads, with those heads locked (so every create that
// queued a task behind one of them has committed).
func queuedFirst(ctx context.Context, tx *sql.Tx, refs map[string]uint32) (map[string]queuedTask, error) {
	first := map[string]queuedTask{}
	if len(refs) == 0 {
		return first, nil
	}
	q, args := refArgs(queries.QueuedOfReferences, refs)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var h queuedTask
		var ref string
		if err := rows.Scan(&h.id, &ref, &h.pos, &h.held); err != nil {
			return nil, err
		}
		if cur, ok := first[ref]; !ok || h.pos < cur.pos {
			first[ref] = h
		}
	}
	return first, rows.Err()
}

// queuedRow is a queued task of a reference, as QueuedOfReferences reads it.
type queuedRow struct {
	ref  string
	task queuedTask
}

// lockLeasedAndQueued locks those of ids (at most MarkChunk) still leased to claim claimID
// (eventstore.LockLeasedOnly) and returns them with the queued tasks of refs, read in one statement
// after the lock (LeasedAndQueued).
func lockLeasedAndQueued(ctx context.Context, tx *sql.Tx, claimID string, ids []int64, refs map[string]uint32) ([]int64, []queuedRow, error) {
	ids = mysql.Unique(ids)
	args, err := eventstore.LockLeasedOnly(ctx, tx, claimID, ids)
	if err != nil {
		return nil, nil, err
	}
	q, refArgs := refArgs(strings.Replace(queries.LeasedAndQueued, "/*ids*/", mysql.Placeholders(len(ids)), 1), refs)
	rows, err := tx.QueryContext(ctx, q, append(args, refArgs...)...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var held []int64
	var queued []queuedRow
	for rows.Next() {
		var part int
		var r queuedRow
		var ref sql.NullString
		if err := rows.Scan(&part, &r.task.id, &ref, &r.task.pos, &r.task.held); err != nil {
			return nil, nil, err
		}
		if part == 0 {
			held = append(held, r.task.id)
			continue
		}
		r.ref = ref.String
		queued = append(queued, r)
	}
	return held, queued, rows.Err()
}

// firstOf is queuedFirst's answer from rows read before: the first queued task of each of refs.
func firstOf(rows []queuedRow, refs map[string]uint32) map[string]queuedTask {
	first := map[string]queuedTask{}
	for _, r := range rows {
		if _, ok := refs[r.ref]; !ok {
			continue
		}
		if cur, ok := first[r.ref]; !ok || r.task.pos < cur.pos {
			first[r.ref] = r.task
		}
	}
	return first
}

// promote hands each reference on to its first queued task (first): pending, or, with chain,
// leased to c and returned. A promoted task joins the event worker workerOf names (its head's, when
// that worker has room, or a drafted one), else none; a task in guarded joins it only if the worker
// still has room (a live worker that is not full, read in the statement), else none.
func promote(ctx context.Context, tx *sql.Tx, c exactlyonce.Claim, first map[string]queuedTask, workerOf, guarded map[int64]string,
	chain bool) ([]exactlyonce.Event, error) {
	if len(first) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, len(first))
	for _, h := range first {
		ids = append(ids, h.id)
	}
	slices.Sort(ids)
	promote, pre := queries.PromoteQueued, []any(nil)
	if chain {
		promote, pre = queries.PromoteQueuedLeased, []any{c.ID, c.Lease.Microseconds()}
	}
	worker := "worker_id"
	if len(workerOf) > 0 {
		var b strings.Builder
		b.WriteString("CASE")
		for _, id := range ids {
			if w, ok := workerOf[id]; ok && guarded[id] == "" {
				b.WriteString(" WHEN id = ? THEN ?")
				pre = append(pre, id, w)
			}
		}
		// The guarded tasks, one branch per worker: its tasks, and the worker if it has room
		// (WorkerIfRoom), else NULL.
		byWorker := map[string][]int64{}
		for _, id := range ids {
			if w := guarded[id]; w != "" {
				byWorker[w] = append(byWorker[w], id)
			}
		}
		for _, w := range slices.Sorted(maps.Keys(byWorker)) {
			b.WriteString(" WHEN id IN (" + mysql.Placeholders(len(byWorker[w])) + ") THEN (" + agentstore.WorkerIfRoom + ")")
			pre = append(append(pre, mysql.IDArgs(byWorker[w])...), w)
		}
		b.WriteString(" ELSE worker_id END")
		worker = b.String()
	}
	q, idArgs := mysql.ExpandIDs(strings.Replace(promote, "/*worker*/", worker, 1), ids)
	res, err := tx.ExecContext(ctx, q, append(append(pre, idArgs...), len(ids))...)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	if chain && n < int64(len(ids)) {
		// A task a bulk retry's part held again after queuedFirst read it (PromoteQueuedLeased's
		// guard left it queued): promoted pending, its hold kept, not handed on.
		q, idArgs := mysql.ExpandIDs(strings.Replace(queries.PromoteQueued, "/*worker*/", worker, 1), ids)
		res, err := tx.ExecContext(ctx, q, append(append(pre[2:len(pre):len(pre)], idArgs...), len(ids))...)
		if err != nil {
			return nil, err
		}
		more, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		n += more
	}
	if n != int64(len(ids)) {
		return nil, fmt.Errorf("promoted %d rows for %d queued tasks", n, len(ids))
	}
	if !chain {
		return nil, nil
	}
	q, idArgs = mysql.ExpandIDs(queries.LeasedTasks, ids)
	return eventstore.ScanLeasedEvents(tx.QueryContext(ctx, q, append([]any{c.ID}, idArgs...)...))
}
