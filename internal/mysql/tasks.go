package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/routing"
)

// taskBuckets is the number of rows of task_buckets (migrations/0009_tasks.sql).
const taskBuckets = 4096

// taskBucket is the bucket of a reference with routing hash h.
func taskBucket(h uint32) int64 { return int64(h % taskBuckets) }

// ReferenceHash is the routing hash of a task's reference: every task of one reference has it, so
// they fall in one agent's range and share one bucket.
func ReferenceHash(ref string) uint32 { return routing.Hash([]byte(ref)) }

// taskColumns are the task's columns of an events row, NULL for other kinds.
type taskColumns struct {
	url, reference       sql.NullString
	payload              []byte
	maxRetries, position sql.NullInt64
	hash                 uint32
}

func (t taskColumns) task(kind exactlyonce.Kind) *exactlyonce.Task {
	if kind != exactlyonce.KindTask {
		return nil
	}
	return &exactlyonce.Task{URL: t.url.String, Payload: t.payload, ReferenceID: t.reference.String,
		MaxRetries: int(t.maxRetries.Int64), Position: t.position.Int64, Hash: t.hash}
}

// CreatedTask is one task a create stored.
type CreatedTask struct {
	ID int64
	// Head tells whether the task is pending now (it heads its reference, or has none): a queue
	// message may name it. A task that is not is queued behind an earlier task of its reference, and
	// the settlement of that task hands it on.
	Head bool
}

// CreateTasks stores tasks, all or none, in the order given: a reference's tasks are delivered in
// the order their creates committed, and, within one call, in the order of tasks.
//
// Concurrent calls share transactions (group commit, taskCreates): while one transaction runs, the
// calls that arrive wait, and the next transaction stores all of them, each call's tasks in the
// order of the call and the calls in the order they arrived. So a create costs its share of one
// transaction's statements (the references' bucket locks, the read of which have an open task, one
// INSERT, one commit) rather than all of them: the tasks benchmark's creates were bound by the
// database's per-statement cost. A call returns once the transaction holding its tasks committed.
// If a shared transaction fails, each of its calls is run again in a transaction of its own, so a
// call fails only for its own sake.
func (s *Store) CreateTasks(ctx context.Context, tasks []exactlyonce.NewTask) ([]CreatedTask, error) {
	if err := checkTaskBatch(tasks); err != nil {
		return nil, err
	}
	c := &createCall{tasks: tasks, done: make(chan struct{})}
	s.taskCreates.add(s, c)
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		// The call may still commit: as with a transaction whose commit's answer is lost.
		return nil, interpret("create tasks", ctx.Err())
	}
}

// createTasksAlone stores tasks in a transaction of its own (one call's, or a group's).
func (s *Store) createTasksAlone(ctx context.Context, tasks []exactlyonce.NewTask) ([]CreatedTask, error) {
	// An allocator that takes ids outside any transaction (block) takes them before ours begins: a
	// refill inside it would need a second connection while this one holds the buckets' locks, and
	// with every connection of the pool held by creates it would wait for ever (as CreateKeyed).
	var ids []int64
	if !s.alloc.inTx() {
		var err error
		if ids, err = s.alloc.take(ctx, nil, len(tasks)); err != nil {
			return nil, interpret("create tasks", err)
		}
	}
	var out []CreatedTask
	err := inTx(ctx, s.db, s.stats, s.retry, func(tx *sql.Tx) error {
		taken := ids
		if taken == nil {
			var err error
			if taken, err = s.alloc.take(ctx, tx, len(tasks)); err != nil {
				return err
			}
		}
		var err error
		out, err = createTaskRows(ctx, tx, tasks, taken)
		return err
	})
	if err != nil {
		return nil, interpret("create tasks", err)
	}
	return out, nil
}

// createCall is one CreateTasks call waiting for its transaction.
type createCall struct {
	tasks []exactlyonce.NewTask
	out   []CreatedTask
	err   error
	done  chan struct{}
}

// taskCreates is the group commit of CreateTasks: at most one transaction at a time, run by a
// goroutine that takes every call waiting (up to MaxPendingBatch tasks) into the next one, until
// none waits.
type taskCreates struct {
	mu      sync.Mutex
	waiting []*createCall
	running bool
}

// createGroupTimeout bounds one shared transaction, retries included: it runs for callers that may
// have gone, so it has its own deadline rather than theirs.
const createGroupTimeout = 30 * time.Second

func (g *taskCreates) add(s *Store, c *createCall) {
	g.mu.Lock()
	g.waiting = append(g.waiting, c)
	start := !g.running
	g.running = true
	g.mu.Unlock()
	if start {
		go g.run(s)
	}
}

func (g *taskCreates) run(s *Store) {
	for {
		g.mu.Lock()
		n, tasks := 0, 0
		for n < len(g.waiting) && (n == 0 || tasks+len(g.waiting[n].tasks) <= MaxPendingBatch) {
			tasks += len(g.waiting[n].tasks)
			n++
		}
		if n == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		calls := g.waiting[:n:n]
		g.waiting = append([]*createCall(nil), g.waiting[n:]...)
		g.mu.Unlock()
		s.createGroup(calls)
	}
}

// createGroup stores the calls' tasks in one transaction, or, if that fails, each call's alone.
func (s *Store) createGroup(calls []*createCall) {
	ctx, cancel := context.WithTimeout(context.Background(), createGroupTimeout)
	defer cancel()
	if len(calls) == 1 {
		c := calls[0]
		c.out, c.err = s.createTasksAlone(ctx, c.tasks)
		close(c.done)
		return
	}
	var all []exactlyonce.NewTask
	for _, c := range calls {
		all = append(all, c.tasks...)
	}
	out, err := s.createTasksAlone(ctx, all)
	if err != nil {
		for _, c := range calls {
			c.out, c.err = s.createTasksAlone(ctx, c.tasks)
			close(c.done)
		}
		return
	}
	for _, c := range calls {
		c.out, out = out[:len(c.tasks):len(c.tasks)], out[len(c.tasks):]
		close(c.done)
	}
}

// maxTaskInsertBytes bounds the payload bytes of one INSERT, well under the smallest
// max_allowed_packet in use (16 MiB on MariaDB 10.11).
const maxTaskInsertBytes = 4 << 20

func checkTaskBatch(tasks []exactlyonce.NewTask) error {
	if len(tasks) < 1 || len(tasks) > MaxPendingBatch {
		return fmt.Errorf("create tasks: %d tasks; one batch is 1 to %d", len(tasks), MaxPendingBatch)
	}
	return nil
}

// createTaskRows stores tasks with the given ids in tx: the references' buckets locked, each task
// pending if it heads its reference, else queued behind it.
func createTaskRows(ctx context.Context, tx *sql.Tx, tasks []exactlyonce.NewTask, ids []int64) ([]CreatedTask, error) {
	// The references' buckets, locked and advanced by the positions the tasks take, before
	// anything else of theirs is read.
	hashes := map[string]uint32{}
	counts := map[int64]int64{}
	for _, task := range tasks {
		if task.ReferenceID == "" {
			continue
		}
		h, ok := hashes[task.ReferenceID]
		if !ok {
			h = ReferenceHash(task.ReferenceID)
			hashes[task.ReferenceID] = h
		}
		counts[taskBucket(h)]++
	}
	positions, open, err := advanceTaskBuckets(ctx, tx, counts, hashes)
	if err != nil {
		return nil, err
	}
	out := make([]CreatedTask, len(tasks))
	rows := make([]taskRow, len(tasks))
	for i, task := range tasks {
		r := taskRow{id: ids[i], task: task, state: exactlyonce.Pending, hash: routing.EventHash(ids[i])}
		if ref := task.ReferenceID; ref != "" {
			r.hash = hashes[ref]
			b := taskBucket(r.hash)
			positions[b]++
			r.position = sql.NullInt64{Int64: positions[b], Valid: true}
			if open[ref] {
				r.state = exactlyonce.Queued
			}
			open[ref] = true
		}
		rows[i] = r
		out[i] = CreatedTask{ID: r.id, Head: r.state == exactlyonce.Pending}
	}
	if err := insertTasks(ctx, tx, rows); err != nil {
		return nil, err
	}
	return out, nil
}

type taskRow struct {
	id       int64
	task     exactlyonce.NewTask
	state    exactlyonce.State
	hash     uint32
	position sql.NullInt64
}

func insertTasks(ctx context.Context, tx *sql.Tx, rows []taskRow) error {
	for len(rows) > 0 {
		n, size := 0, 0
		for n < len(rows) && (n == 0 || size+len(rows[n].task.Payload) <= maxTaskInsertBytes) {
			size += len(rows[n].task.Payload)
			n++
		}
		chunk := rows[:n]
		rows = rows[n:]
		args := make([]any, 0, 8*len(chunk))
		for _, r := range chunk {
			var ref sql.NullString
			if r.task.ReferenceID != "" {
				ref = sql.NullString{String: r.task.ReferenceID, Valid: true}
			}
			args = append(args, r.id, r.hash, r.state, r.task.URL, []byte(r.task.Payload), ref, r.task.MaxRetries, r.position)
		}
		q := strings.Replace(query("InsertTaskRows"), "/*rows*/",
			strings.TrimSuffix(strings.Repeat("(?, 'task', ?, ?, NOW(6), ?, ?, ?, ?, ?), ", len(chunk)), ", "), 1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// lockTaskBucketsOnly locks the buckets, for a transaction that takes no position from them (a
// settlement): one statement.
func lockTaskBucketsOnly(ctx context.Context, tx *sql.Tx, buckets []int64) error {
	if len(buckets) == 0 {
		return nil
	}
	buckets = unique(buckets)
	slices.Sort(buckets)
	q, args := expandIDs(query("LockTaskBuckets"), buckets)
	_, err := tx.ExecContext(ctx, q, args...)
	return err
}

// advanceTaskBuckets locks the buckets and advances each one's sequence by its count, in one
// statement (AdvanceTaskBuckets), then reads in one more (BucketsAndOpen) each sequence as it was
// before, from which the tasks take the positions after it, and which of the references (hashes)
// have an open task.
func advanceTaskBuckets(ctx context.Context, tx *sql.Tx, counts map[int64]int64, hashes map[string]uint32) (map[int64]int64, map[string]bool, error) {
	positions, open := map[int64]int64{}, map[string]bool{}
	if len(counts) == 0 {
		return positions, open, nil
	}
	buckets := make([]int64, 0, len(counts))
	for b := range counts {
		buckets = append(buckets, b)
	}
	slices.Sort(buckets)
	args := make([]any, 0, 3*len(buckets))
	for _, b := range buckets {
		args = append(args, b, counts[b])
	}
	q, ids := expandIDs(strings.Replace(query("AdvanceTaskBuckets"), "/*cases*/",
		strings.TrimSuffix(strings.Repeat("WHEN ? THEN ? ", len(buckets)), " "), 1), buckets)
	if _, err := tx.ExecContext(ctx, q, append(args, ids...)...); err != nil {
		return nil, nil, err
	}
	q, ids = expandIDs(query("BucketsAndOpen"), buckets)
	q, refs := refArgs(q, hashes)
	rows, err := tx.QueryContext(ctx, q, append(ids, refs...)...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var part, bucket, pos int64
		var ref sql.NullString
		if err := rows.Scan(&part, &bucket, &pos, &ref); err != nil {
			return nil, nil, err
		}
		if part == 0 {
			positions[bucket] = pos - counts[bucket]
		} else {
			open[ref.String] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(positions) != len(buckets) {
		return nil, nil, fmt.Errorf("task_buckets holds %d of the %d buckets asked for: the table was changed by hand", len(positions), len(buckets))
	}
	return positions, open, nil
}

// refArgs expands /*hashes*/ and /*refs*/ in q for the references of hashes.
func refArgs(q string, hashes map[string]uint32) (string, []any) {
	var hs, refs []any
	seen := map[uint32]bool{}
	for ref, h := range hashes {
		refs = append(refs, ref)
		if !seen[h] {
			seen[h] = true
			hs = append(hs, h)
		}
	}
	q = strings.Replace(q, "/*hashes*/", placeholders(len(hs)), 1)
	q = strings.Replace(q, "/*refs*/", placeholders(len(refs)), 1)
	return q, append(hs, refs...)
}

// SettleTasks records, in one short transaction, the outcomes of delivery attempts of tasks leased
// to claim c, and for each reference whose task settled, hands the reference on to its next queued
// task: pending, or, with chain, leased to c (returned in Next). Each outcome is written only if
// the task is still leased to c (the guard of every settlement), with its attempt.
func (s *Store) SettleTasks(ctx context.Context, c exactlyonce.Claim, outcomes []exactlyonce.TaskOutcome, chain bool) (exactlyonce.TaskSettlement, error) {
	var out exactlyonce.TaskSettlement
	if len(outcomes) == 0 {
		return out, nil
	}
	ids := make([]int64, len(outcomes))
	var buckets []int64
	for i, o := range outcomes {
		ids[i] = o.Event.ID
		if o.Event.Task != nil && o.Event.Task.ReferenceID != "" {
			buckets = append(buckets, taskBucket(o.Event.Task.Hash))
		}
	}
	err := inTx(ctx, s.db, s.stats, s.retry, func(tx *sql.Tx) error {
		out = exactlyonce.TaskSettlement{}
		if err := lockTaskBucketsOnly(ctx, tx, buckets); err != nil {
			return err
		}
		held := map[int64]bool{}
		for rest := ids; len(rest) > 0; {
			chunk := rest[:min(len(rest), markChunk)]
			rest = rest[len(chunk):]
			q, args := expandIDs(query("LockLeased"), chunk)
			got, err := scanIDs(tx.QueryContext(ctx, q, append([]any{c.ID}, args...)...))
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
			} else {
				state, wait := exactlyonce.Pending, o.Wait
				if o.Final {
					state, wait = exactlyonce.Failed, 0
				}
				text := truncateError(o.Attempt.Error)
				if _, err := tx.ExecContext(ctx, query("FailLeased"), state, text, wait.Microseconds(), state, state, c.By,
					c.ID, c.ID, id); err != nil {
					return err
				}
				if !o.Final {
					out.Retrying = append(out.Retrying, id)
					continue
				}
				out.GaveUp = append(out.GaveUp, id)
			}
			if t := o.Event.Task; t != nil && t.ReferenceID != "" {
				settledRefs[t.ReferenceID] = t.Hash
			}
		}
		for rest := completed; len(rest) > 0; {
			chunk := rest[:min(len(rest), markChunk)]
			rest = rest[len(chunk):]
			n, err := setValues(ctx, tx, "SettleLeased", chunk, values, []any{c.By, c.ID})
			if err != nil {
				return err
			}
			if n != int64(len(chunk)) {
				return fmt.Errorf("settled %d rows for %d leased tasks", n, len(chunk))
			}
		}
		out.Completed = completed
		if err := insertAttempts(ctx, tx, c.ID, attempts); err != nil {
			return err
		}
		next, err := promote(ctx, tx, c, settledRefs, chain)
		out.Next = next
		return err
	})
	if err != nil {
		return exactlyonce.TaskSettlement{}, interpret("settle tasks", err)
	}
	return out, nil
}

func truncateError(text string) string {
	text = strings.ToValidUTF8(text, "?")
	if len(text) > maxErrorText {
		text = strings.ToValidUTF8(text[:maxErrorText], "")
	}
	return text
}

func insertAttempts(ctx context.Context, tx *sql.Tx, claimID string, outcomes []exactlyonce.TaskOutcome) error {
	for rest := outcomes; len(rest) > 0; {
		chunk := rest[:min(len(rest), markChunk)]
		rest = rest[len(chunk):]
		args := make([]any, 0, 7*len(chunk))
		for _, o := range chunk {
			a := o.Attempt
			var text sql.NullString
			if a.Error != "" {
				text = sql.NullString{String: truncateError(a.Error), Valid: true}
			}
			args = append(args, o.Event.ID, a.Number, a.Started.UTC(), a.Duration.Microseconds(), a.Status, text, claimID)
		}
		q := strings.Replace(query("InsertAttempts"), "/*rows*/",
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?), ", len(chunk)), ", "), 1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// promote hands each of the references on to its next queued task (the lowest position), in the
// transaction that settled the reference's head, with the references' buckets locked: pending, or,
// with chain, leased to c and returned.
func promote(ctx context.Context, tx *sql.Tx, c exactlyonce.Claim, refs map[string]uint32, chain bool) ([]exactlyonce.Event, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	q, args := refArgs(query("QueuedOfReferences"), refs)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	type head struct{ id, pos int64 }
	first := map[string]head{}
	for rows.Next() {
		var h head
		var ref string
		if err := rows.Scan(&h.id, &ref, &h.pos); err != nil {
			rows.Close()
			return nil, err
		}
		if cur, ok := first[ref]; !ok || h.pos < cur.pos {
			first[ref] = h
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(first) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, len(first))
	for _, h := range first {
		ids = append(ids, h.id)
	}
	slices.Sort(ids)
	name, pre := "PromoteQueued", []any(nil)
	if chain {
		name, pre = "PromoteQueuedLeased", []any{c.ID, c.Lease.Microseconds()}
	}
	q, idArgs := expandIDs(query(name), ids)
	res, err := tx.ExecContext(ctx, q, append(append(pre, idArgs...), len(ids))...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, err
	} else if n != int64(len(ids)) {
		return nil, fmt.Errorf("promoted %d rows for %d queued tasks", n, len(ids))
	}
	if !chain {
		return nil, nil
	}
	q, idArgs = expandIDs(query("LeasedTasks"), ids)
	got, err := scanClaimed(tx.QueryContext(ctx, q, append([]any{c.ID}, idArgs...)...))
	if err != nil {
		return nil, err
	}
	next := make([]exactlyonce.Event, len(got))
	for i, r := range got {
		next[i] = r.event(exactlyonce.Processing)
	}
	return next, nil
}
