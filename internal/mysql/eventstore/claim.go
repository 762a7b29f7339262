package eventstore

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/agentstore"
)

// ClaimIDs claims those of the named events that are claimable and that nobody else holds, in one
// transaction (see claim). An id may appear more than once; it is claimed at most once. The ids it
// does not claim are settled, held by another claim, or unknown: Outcomes tells which. On an error
// nothing was settled or leased, unless the error came from the commit itself (its answer lost),
// in which case the claim may have committed: the caller must treat its events as unknown.
func (s *Store) ClaimIDs(ctx context.Context, c exactlyonce.Claim, ids []int64, decide exactlyonce.Decide) (exactlyonce.Claimed, error) {
	ids = mysql.Unique(ids)
	if len(ids) == 0 {
		return exactlyonce.Claimed{}, nil
	}
	var tasks *taskRoom
	out, err := s.claim(ctx, c, decide, func(tx *sql.Tx) ([]exactlyonce.Event, error) {
		tasks = &taskRoom{room: MaxClaimTasks} // afresh in every run of the transaction
		return claimIDs(ctx, tx, ids, tasks)
	})
	if err == nil {
		out.LeftOut = tasks.left
	}
	return out, mysql.Interpret("claim events", err)
}

// ClaimDue claims up to limit due events that nobody else holds, in one transaction (see claim):
// pending events older than grace, and processing events whose lease expired, whose routing hash
// lies in c.Range (nil: every hash), tasks excepted when c.SkipTasks. Fewer than limit
// (Claimed.Count) means no more were due in that range when it looked.
func (s *Store) ClaimDue(ctx context.Context, c exactlyonce.Claim, grace time.Duration, limit int, decide exactlyonce.Decide) (exactlyonce.Claimed, error) {
	r := exactlyonce.AllHashes
	if c.Range != nil {
		r = *c.Range
	}
	from := s.claimFrom()
	full := false
	out, err := s.claim(ctx, c, decide, func(tx *sql.Tx) ([]exactlyonce.Event, error) {
		claimed := make([]exactlyonce.Event, 0, limit)
		for _, q := range []string{claimDueFrom[from], claimDueBefore[from]} {
			if q == "" || len(claimed) == limit {
				continue
			}
			rows, err := tx.QueryContext(ctx, q, r.Lo, r.Hi, grace.Microseconds(), c.SkipTasks, limit-len(claimed))
			if claimed, err = scanClaimedHeads(claimed, rows, err); err != nil {
				return nil, err
			}
		}
		full = len(claimed) == limit
		var dropped int
		claimed, dropped = capClaimedTasks(claimed, MaxClaimTasks)
		full = full || dropped > 0
		return claimed, readClaimedTasks(ctx, tx, claimed)
	})
	s.dueFull.Store(full && err == nil)
	return out, mysql.Interpret("claim due events", err)
}

// MaxClaimTaskBytes bounds the task payloads one claim holds in memory: a claim reads its tasks
// whole (readClaimedTasks) and delivers them from memory, in a Lambda of 256 MB. MaxClaimTasks is
// the tasks that many bytes hold at the largest payload the API accepts (128 of 256 KiB): a claim
// due for more leaves the rest for the next one, whatever its limit of rows.
const (
	MaxClaimTaskBytes = 32 << 20
	MaxClaimTasks     = MaxClaimTaskBytes / exactlyonce.MaxTaskPayloadBytes
)

// capClaimedTasks keeps, of the heads a claim locked, every event that is not a task and the first
// max tasks, in their order, and says how many tasks it left out (still pending: they are not
// leased, and their locks end with the claim's transaction).
func capClaimedTasks(claimed []exactlyonce.Event, max int) ([]exactlyonce.Event, int) {
	tasks, dropped := 0, 0
	kept := claimed[:0]
	for _, ev := range claimed {
		if ev.Kind == exactlyonce.KindTask {
			if tasks == max {
				dropped++
				continue
			}
			tasks++
		}
		kept = append(kept, ev)
	}
	return kept, dropped
}

// openSubpartitions is the number of subpartitions of `open`, opensp0 to opensp7, as the
// migrations define them (TestClaimDueNamesTheOpenSubpartitions compares).
const openSubpartitions = 8

// claimDueFrom[i] is ClaimDue's statement over the subpartitions of `open` from the i-th to the
// last, claimDueBefore[i] over those before the i-th ("" for none): see ClaimDue in events.sql.
var claimDueFrom, claimDueBefore = func() (from, before [openSubpartitions]string) {
	for i := range openSubpartitions {
		from[i] = claimDueOver(i, openSubpartitions)
		before[i] = claimDueOver(0, i)
	}
	return from, before
}()

// claimDueOver is ClaimDue's statement over the subpartitions of `open` numbered lo to hi-1, or ""
// for none.
func claimDueOver(lo, hi int) string {
	if lo >= hi {
		return ""
	}
	names := make([]string, 0, hi-lo)
	for i := lo; i < hi; i++ {
		names = append(names, "opensp"+strconv.Itoa(i))
	}
	return strings.Replace(queries.ClaimDue, "/*open*/", strings.Join(names, ", "), 1)
}

// claimFrom is the subpartition of `open` this store's next ClaimDue starts at: the first, unless
// its last claim was full (it is draining a backlog), then the next of a rotation, which concurrent
// claims of the store share and which starts at a random place in each process, so that the
// claims of a drain, and of the processes draining side by side, start in different places. A
// full claim leaves its rows delete-marked at the front of the subpartitions it read until purge
// removes them, and the next claim starting there would walk over them (events.sql, ClaimDue).
func (s *Store) claimFrom() int {
	if !s.dueFull.Load() {
		return 0
	}
	return int(s.dueNext.Add(1) % openSubpartitions)
}

// claim runs one claiming transaction: lock with lock, ask decide what becomes of each locked event,
// and write that: the failures first, in the order the rows were locked, then the settlements, then
// the leases; then commit. An event decide leaves is untouched (the commit releases its lock).
func (s *Store) claim(ctx context.Context, c exactlyonce.Claim, decide exactlyonce.Decide, lock func(*sql.Tx) ([]exactlyonce.Event, error)) (exactlyonce.Claimed, error) {
	if c.ID == "" || c.By == "" || decide == nil {
		return exactlyonce.Claimed{}, fmt.Errorf("claim: an ID, a By and a Decide are required")
	}
	var out exactlyonce.Claimed
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		out = exactlyonce.Claimed{}
		rows, err := lock(tx)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			if c.Workers != nil {
				c.Workers.Draft(nil) // once in every run: this run's draft is none
			}
			return nil
		}
		decided := decide(ctx, rows)
		if len(decided) != len(rows) {
			return fmt.Errorf("claim: %d decisions for %d claimed events", len(decided), len(rows))
		}
		values := make([]string, 0, len(rows)) // the value of each of out.Settled, in its order
		out.Settled = make([]int64, 0, len(rows))
		var leased []int64
		for i, d := range decided {
			ev := rows[i]
			switch d.Action {
			case exactlyonce.Settle:
				values = append(values, d.Value)
				out.Settled = append(out.Settled, ev.ID)
			case exactlyonce.Fail:
				if err := recordFailure(ctx, tx, &out, c, ev.ID, d.Failure); err != nil {
					return err
				}
			case exactlyonce.Lease:
				leased = append(leased, ev.ID)
				out.Leased = append(out.Leased, ev)
			}
		}
		if err := markProcessed(ctx, tx, out.Settled, values, c.By, c.ID); err != nil {
			return err
		}
		a, worker := draftLeased(c, out.Leased)
		if err := lease(ctx, tx, leased, c.ID, c.Lease, worker); err != nil {
			return err
		}
		return writeLeasedDraft(ctx, tx, c, a, worker, out.Leased)
	})
	if err != nil {
		return exactlyonce.Claimed{}, err
	}
	return out, nil
}

// draftLeased has c.Workers draft the event workers of the tasks of leased that have a reference
// and no event worker (nothing without c.Workers), and returns the draft and each drafted task's
// worker: the lease names them (Lease's /*worker*/), and writeLeasedDraft writes the workers' rows
// after it, in the claim's transaction.
func draftLeased(c exactlyonce.Claim, leased []exactlyonce.Event) (exactlyonce.WorkerAssignment, map[int64]string) {
	if c.Workers == nil {
		return exactlyonce.WorkerAssignment{}, nil
	}
	var tasks []exactlyonce.Event
	for _, ev := range leased {
		if ev.Task != nil && ev.Task.ReferenceID != "" && ev.Task.WorkerID == "" {
			tasks = append(tasks, ev)
		}
	}
	a := c.Workers.Draft(tasks) // once in every run, even with no task
	worker := map[int64]string{}
	for w, ids := range a.Tasks {
		for _, id := range ids {
			worker[id] = w
		}
	}
	return a, worker
}

// writeLeasedDraft writes the event workers of a claim's draft a (agentstore.WriteDraft: the new
// workers and the growth, after the leases that named the tasks' workers: the task rows first, then
// the workers' rows, the order of every transaction that writes both), and names each task's worker
// in leased.
func writeLeasedDraft(ctx context.Context, tx *sql.Tx, c exactlyonce.Claim, a exactlyonce.WorkerAssignment, worker map[int64]string,
	leased []exactlyonce.Event) error {
	if len(worker) == 0 {
		return nil
	}
	if err := agentstore.WriteDraft(ctx, tx, c.Workers.Agent, a); err != nil {
		return err
	}
	for i, ev := range leased {
		if w, ok := worker[ev.ID]; ok {
			task := *ev.Task
			task.WorkerID = w
			leased[i].Task = &task
		}
	}
	return nil
}

// recordFailure records, in the claim's transaction, the failure f of the claimed event id: the
// event waits, or is failed for good.
func recordFailure(ctx context.Context, tx *sql.Tx, out *exactlyonce.Claimed, c exactlyonce.Claim, id int64, f exactlyonce.Failure) error {
	state, wait, text := failed(f)
	if _, err := tx.ExecContext(ctx, queries.FailClaimed, state, text, wait.Microseconds(), state, state, c.By,
		c.ID, id); err != nil {
		return err
	}
	if out.Failed == nil {
		out.Failed = map[int64]error{}
	}
	out.Failed[id] = f.Err
	if state == exactlyonce.Failed {
		out.GaveUp = append(out.GaveUp, id)
	}
	return nil
}

// Outcomes tells, for ids a claim did not take, what each is: open but held by another claim (its
// row lock or its lease, or waiting its backoff), a task the database brings back by itself (queued
// behind its reference, or waiting its backoff: deferred), settled already, or missing. It reads only the
// `open` partition and the one-row counter, never the settled history, so its cost does not grow
// with history: an id at or below the counter that is not open is settled (processed or failed),
// one above it names no event. The one case this cannot tell apart is an id the allocator handed out
// whose insert never committed (a gap): a queue message names only committed events (it is sent after
// the commit), so only a forged message can name one, and it is acknowledged as settled instead of
// going to the dead-letter queue. Consistent reads: no lock taken, none waited for.
func (s *Store) Outcomes(ctx context.Context, ids []int64) (map[int64]exactlyonce.Outcome, error) {
	out := make(map[int64]exactlyonce.Outcome, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	q, args := mysql.ExpandIDs(queries.OpenStates, ids)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mysql.Interpret("read event states", err)
	}
	for rows.Next() {
		var id int64
		var kind exactlyonce.Kind
		var waits sql.NullBool
		if err := rows.Scan(&id, &kind, &waits); err != nil {
			rows.Close()
			return nil, mysql.Interpret("read event states", err)
		}
		out[id] = exactlyonce.OutcomeBusy
		if kind == exactlyonce.KindTask && waits.Bool {
			out[id] = exactlyonce.OutcomeDeferred
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, mysql.Interpret("read event states", err)
	}
	counter, err := s.core.ReadIDCounter(ctx)
	if err != nil {
		return nil, mysql.Interpret("read the id counter", err)
	}
	for _, id := range ids {
		if _, ok := out[id]; ok {
			continue
		}
		if id <= counter {
			out[id] = exactlyonce.OutcomeAlreadySettled
		} else {
			out[id] = exactlyonce.OutcomeMissing
		}
	}
	return out, nil
}

// claimAgain are the pauses before claimIDs asks again for claimable events its claim skipped: at
// most len(claimAgain) more claims, about 30 ms in all. A row that another claim really holds
// stays locked through them (and costs its batch that much); a row that a scan held for an instant
// is claimed. Under CPU contention an instant can be a few milliseconds: a thread holding a row's
// lock for the length of one comparison can be descheduled.
var claimAgain = []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond}

// claimIDs locks those of ids that are claimable and that no other transaction holds, in tx, and
// returns them. A locking scan by another transaction holds each row it passes for an instant, so SKIP
// LOCKED may skip a row that nobody is processing; such a false "busy" would cost the event a
// whole visibility timeout on the queue (and count towards its dead-letter limit). So the ids the
// claim skipped that a consistent read still finds claimable are claimed again, a bounded number
// of times; a row another claim really holds stays locked through them and is reported busy.
//
// It holds at most tasks.room tasks (MaxClaimTasks, as a claim of due events: their payloads are
// read into memory whole); the tasks it locks beyond them are left out (tasks.left), pending, and
// not claimed again by the retries below.
func claimIDs(ctx context.Context, tx *sql.Tx, ids []int64, tasks *taskRoom) ([]exactlyonce.Event, error) {
	var out []exactlyonce.Event
	want := ids
	for try := 0; ; try++ {
		q, args := mysql.ExpandIDs(queries.ClaimIDs, want)
		rows, err := tx.QueryContext(ctx, q, append(args, len(want))...)
		left := len(tasks.left)
		got, err := scanClaimedColumns(make([]exactlyonce.Event, 0, len(want)), rows, err, 3+8, tasks)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
		if len(got)+len(tasks.left)-left == len(want) || try == len(claimAgain) {
			return out, nil
		}
		// Of the rest, only those still claimable can be claimed: the others are settled, leased or
		// unknown (or left out: not claimed again).
		rest := without(want, got)
		if len(tasks.left) > left {
			rest = slices.DeleteFunc(rest, func(id int64) bool { return slices.Contains(tasks.left[left:], id) })
		}
		q, args = mysql.ExpandIDs(queries.ClaimableIDs, rest)
		if want, err = mysql.ScanIDs(tx.QueryContext(ctx, q, args...)); err != nil {
			return nil, err
		}
		if len(want) == 0 {
			return out, nil
		}
		if pause := claimAgain[try]; pause > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(pause):
			}
		}
	}
}

// without returns the ids in all that are not among the claimed events got.
func without(all []int64, got []exactlyonce.Event) []int64 {
	skip := make(map[int64]bool, len(got))
	for _, c := range got {
		skip[c.ID] = true
	}
	var out []int64
	for _, id := range all {
		if !skip[id] {
			out = append(out, id)
		}
	}
	return out
}

// MarkChunk is the most events one UPDATE names: about 50 bytes of SQL each, so a statement stays
// well under 16 KB, beyond which RDS Proxy pins the client's session.
const MarkChunk = 200

// markProcessed settles events claimed in tx with their values (values[i] is ids[i]'s), in
// statements of at most MarkChunk events. It fails, rolling everything back, if an update does not
// touch exactly the claimed rows it names: that would mean a lock did not hold.
func markProcessed(ctx context.Context, tx *sql.Tx, ids []int64, values []string, by, claimID string) error {
	for start := 0; start < len(ids); start += MarkChunk {
		chunk, vals := ids[start:min(len(ids), start+MarkChunk)], values[start:]
		n, err := SetValues(ctx, tx, queries.MarkProcessed, chunk, func(i int) string { return vals[i] }, []any{by, claimID})
		if err != nil {
			return err
		}
		if n != int64(len(chunk)) {
			return fmt.Errorf("processed %d rows for %d claimed events", n, len(chunk))
		}
	}
	return nil
}

// SetValues runs the settling UPDATE q (MarkProcessed, SettleLeased, taskstore's SettleLeasedTasks:
// its CASE expanded to one WHEN ? THEN ? per id, its IN list to one ? per id, then LIMIT ?) in tx,
// with value(i) the value of ids[i] and mid the arguments between the CASE and the IN list, and
// returns the rows it changed. Each id is boxed once, for both of its places: the drain settles
// hundreds of events a statement, and its Go time per event is mostly allocation.
func SetValues(ctx context.Context, tx *sql.Tx, q string, ids []int64, value func(i int) string, mid []any) (int64, error) {
	const when = "WHEN ? THEN ? "
	var cases strings.Builder
	cases.Grow(len(when) * len(ids))
	args := make([]any, 2*len(ids), 3*len(ids)+len(mid)+1)
	for i, id := range ids {
		cases.WriteString(when)
		args[2*i], args[2*i+1] = id, value(i)
	}
	args = append(args, mid...)
	for i := range ids {
		args = append(args, args[2*i])
	}
	args = append(args, len(ids))
	q = strings.Replace(strings.Replace(q, "/*cases*/", cases.String(), 1), "/*ids*/", mysql.Placeholders(len(ids)), 1)
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// lease leases the events claimed in tx to claimID for d, in statements of at most MarkChunk
// events, and fails if an update does not touch exactly the claimed rows it names.
func lease(ctx context.Context, tx *sql.Tx, ids []int64, claimID string, d time.Duration, worker map[int64]string) error {
	for rest := ids; len(rest) > 0; {
		chunk := rest[:min(len(rest), MarkChunk)]
		rest = rest[len(chunk):]
		pre := []any{claimID, d.Microseconds()}
		named := "worker_id"
		if len(worker) > 0 {
			byWorker := map[string][]int64{}
			for _, id := range chunk {
				if w, ok := worker[id]; ok {
					byWorker[w] = append(byWorker[w], id)
				}
			}
			if len(byWorker) > 0 {
				var b strings.Builder
				b.WriteString("CASE")
				for _, w := range slices.Sorted(maps.Keys(byWorker)) {
					b.WriteString(" WHEN id IN (" + mysql.Placeholders(len(byWorker[w])) + ") THEN ?")
					pre = append(append(pre, mysql.IDArgs(byWorker[w])...), w)
				}
				b.WriteString(" ELSE worker_id END")
				named = b.String()
			}
		}
		q, args := mysql.ExpandIDs(strings.Replace(queries.Lease, "/*worker*/", named, 1), chunk)
		res, err := tx.ExecContext(ctx, q, append(append(pre, args...), len(chunk))...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != int64(len(chunk)) {
			return fmt.Errorf("leased %d rows for %d claimed events", n, len(chunk))
		}
	}
	return nil
}
