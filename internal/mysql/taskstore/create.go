// Package taskstore is the tasks (tasks.sql, migrations/0009_tasks.sql): events of kind task,
// delivered in the order of their reference. Creates, grouped into shared transactions (CreateTasks),
// take positions from their references' buckets and queue behind their references' heads;
// settlements (SettleTasks) record the delivery attempts, settle the tasks' rows through the event
// store's transaction-level functions, write the event workers' books (agentstore.WorkerBooks) and
// promote the next task of each reference; manual retries (RetryTask, RetryReference) put failed
// tasks back in their place or at the end; and the reads (Attempts, ReferenceTasks) read the packed
// history (pagestore) after `events`.
//
// It depends on the core, eventstore, agentstore and pagestore; keystore stores the tasks of keyed
// creates through InsertTasks.
package taskstore

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/groupcommit"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/routing"
)

// queryTexts are the statements of tasks.sql.
type queryTexts struct {
	LockTaskBuckets, AdvanceTaskBuckets, BucketsAndHeads, OpenHeads, LockHeads, InsertTaskRows, QueuedOfReferences, LeasedAndQueued, PromoteQueued, PromoteQueuedLeased, LeasedTasks, SettleLeasedTasks, InsertAttempts, Attempts, AttemptsAfter, ReferencePosition, ReferenceTasks, LockFailedTask, TaskOf, LaterTaskStarted, ReferenceHead, RequeueTask, RetryTask, UncountRetried, LockFailedTasks string
}

//go:generate go run github.com/exactlyonce/exactlyonce/internal/mysql/querygen queries=queryTexts:tasks.sql retryQueries=retryTexts:retry.sql dirQueries=directoryTexts:directory.sql

// Store reads and writes tasks. Safe for concurrent use; build one per process, on the process's
// core handle: its creates are grouped into shared transactions per Store.
type Store struct {
	core *mysql.DB
	db   *sql.DB
	// creates groups concurrent CreateTasks calls into shared transactions (createGroup).
	creates groupcommit.Group[[]exactlyonce.NewTask, createdTasks]
	// events reads a reference's tasks by id (Get: `events`, else its page), directoryDone caches
	// that the reference directory is complete (directory.go).
	events        *eventstore.Store
	directoryDone atomic.Bool
	// history is the packed history's tiers: page rows, then the archive (WithHistory).
	history pagestore.History
	// beforeRetryBucket, if set, runs when a bulk retry in place has written its tasks and is
	// about to take the bucket (retryInPlaceFirst): tests hold the retry there. Nil in the product.
	beforeRetryBucket func()
	// retryPart, retryHold and retryBudget size a reference's bulk retry (retry_reference.go); zero
	// is the default. beforeRetryPart, if set, runs before each part (tests stop or fail it there).
	retryPart              int
	retryHold, retryBudget time.Duration
	beforeRetryPart        func(part int) error
	// onFailedSetRead, if set, runs each time a bulk retry reads the reference's failed set
	// (RetryStateOfReference): tests count them. Nil in the product.
	onFailedSetRead func()
	// onRetryMissed, if set, runs when a task's retry found its task not failed under the lock
	// (LockFailedTask), before it reads the task's state again: tests change the task there.
	// Nil in the product.
	onRetryMissed func()
	// onStartedAsked, if set, is told how many later tasks a bulk retry in place first asks
	// "has it started?" about (retryInPlaceFirst): tests count them. Nil in the product.
	onStartedAsked func(n int)
	// afterFailedSetRead, if set, runs right after a bulk retry's read of the failed set, before
	// it locks anything: tests act there. Nil in the product.
	afterFailedSetRead func()
}

// New returns the Store on db, reading the packed history in the database only.
func New(db *mysql.DB) *Store {
	s := &Store{core: db, db: db.Pool(), events: eventstore.New(db)}
	// One transaction at a time, on a context of its own, taking every call waiting (up to
	// eventstore.MaxPendingBatch tasks and maxTaskGroupBytes of payloads; a larger call runs alone)
	// into the next one, until none waits.
	s.creates = groupcommit.Group[[]exactlyonce.NewTask, createdTasks]{Run: s.createGroup,
		MaxRows: eventstore.MaxPendingBatch, MaxBytes: maxTaskGroupBytes, Size: taskCallSize,
		Timeout: createGroupTimeout}
	return s
}

// WithHistory makes s read the packed history through h (its archive too), its own event store's
// reads included (the directory's listing reads a task by id through it, so an archived task is
// found), and returns s. Called once, when the process builds its stores (internal/wire), before s
// is used.
func (s *Store) WithHistory(h pagestore.History) *Store {
	s.history = h
	s.events.WithHistory(h)
	return s
}

// taskBuckets is the number of rows of task_buckets (migrations/0009_tasks.sql, which says why 64).
const taskBuckets = 64

// taskBucket is the bucket of a reference with routing hash h.
func taskBucket(h uint32) int64 { return int64(h % taskBuckets) }

// ReferenceHash is the routing hash of a task's reference: every task of one reference has it, so
// they fall in one agent's range and share one bucket.
func ReferenceHash(ref string) uint32 { return routing.Hash([]byte(ref)) }

// CreateTasks stores tasks, all or none, in the order given: a reference's tasks are delivered in
// the order their creates committed, and, within one call, in the order of tasks.
//
// Concurrent calls share transactions (group commit, internal/groupcommit): while one transaction runs, the
// calls that arrive wait, and the next transaction stores all of them, each call's tasks in the
// order of the call and the calls in the order they arrived. So a create costs its share of one
// transaction's statements (the references' bucket locks, the read of which have an open task, one
// INSERT, one commit) rather than all of them: the tasks benchmark's creates were bound by the
// database's per-statement cost. A call returns once the transaction holding its tasks committed.
// If a shared transaction fails, each of its calls is run again in a transaction of its own, so a
// call fails only for its own sake.
func (s *Store) CreateTasks(ctx context.Context, tasks []exactlyonce.NewTask) ([]exactlyonce.CreatedTask, error) {
	if err := checkTaskBatch(tasks); err != nil {
		return nil, err
	}
	r, err := s.creates.Do(ctx, tasks)
	if err != nil {
		// ctx ended (createGroup fails no call as a group): the call may still commit, as with a
		// transaction whose commit's answer is lost.
		return nil, mysql.Interpret("create tasks", err)
	}
	return r.out, r.err
}

// createTasksAlone stores tasks in a transaction of its own (one call's, or a group's).
func (s *Store) createTasksAlone(ctx context.Context, tasks []exactlyonce.NewTask) ([]exactlyonce.CreatedTask, error) {
	// An allocator that takes ids outside any transaction (block) takes them before ours begins: a
	// refill inside it would need a second connection while this one holds the buckets' locks, and
	// with every connection of the pool held by creates it would wait for ever (as CreateKeyed).
	var ids []int64
	if !s.core.IDsInTx() {
		var err error
		if ids, err = s.core.TakeIDs(ctx, nil, len(tasks)); err != nil {
			return nil, mysql.Interpret("create tasks", err)
		}
	}
	var out []exactlyonce.CreatedTask
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		taken := ids
		if taken == nil {
			var err error
			if taken, err = s.core.TakeIDs(ctx, tx, len(tasks)); err != nil {
				return err
			}
		}
		var err error
		out, err = InsertTasks(ctx, tx, tasks, taken)
		return err
	})
	if err != nil {
		return nil, mysql.Interpret("create tasks", err)
	}
	return out, nil
}

// createdTasks is one CreateTasks call's outcome in its group: each call fails alone.
type createdTasks struct {
	out []exactlyonce.CreatedTask
	err error
}

// createGroupTimeout bounds one shared transaction, retries included: it runs for callers that may
// have gone, so it has its own deadline rather than theirs.
const createGroupTimeout = 30 * time.Second

// maxTaskGroupBytes bounds the payload bytes of the calls one shared transaction takes (a call
// alone may hold more: up to eventstore.MaxPendingBatch payloads of exactlyonce.MaxTaskPayloadBytes).
const maxTaskGroupBytes = 8 << 20

// taskCallSize is a call's rows (its tasks) and bytes (their payloads), for the group's bounds.
func taskCallSize(tasks []exactlyonce.NewTask) (rows, bytes int) {
	for _, t := range tasks {
		bytes += len(t.Payload)
	}
	return len(tasks), bytes
}

// createGroup stores the calls' tasks in one transaction, or, if that fails, each call's alone, so
// that a call fails only for its own sake.
func (s *Store) createGroup(ctx context.Context, calls [][]exactlyonce.NewTask) ([]createdTasks, error) {
	res := make([]createdTasks, len(calls))
	if len(calls) == 1 {
		res[0].out, res[0].err = s.createTasksAlone(ctx, calls[0])
		return res, nil
	}
	var all []exactlyonce.NewTask
	for _, c := range calls {
		all = append(all, c...)
	}
	out, err := s.createTasksAlone(ctx, all)
	if err != nil {
		for i, c := range calls {
			res[i].out, res[i].err = s.createTasksAlone(ctx, c)
		}
		return res, nil
	}
	for i, c := range calls {
		res[i].out, out = out[:len(c):len(c)], out[len(c):]
	}
	return res, nil
}

// maxTaskInsertBytes bounds the payload bytes of one INSERT, well under the smallest
// max_allowed_packet in use (16 MiB on MariaDB 10.11).
const maxTaskInsertBytes = 4 << 20

func checkTaskBatch(tasks []exactlyonce.NewTask) error {
	if len(tasks) < 1 || len(tasks) > eventstore.MaxPendingBatch {
		return fmt.Errorf("create tasks: %d tasks; one batch is 1 to %d", len(tasks), eventstore.MaxPendingBatch)
	}
	return nil
}

// InsertTasks stores tasks with the given ids (taken from the id counter) in tx: the references'
// buckets locked, each task pending if it heads its reference, else queued behind it. It is how a
// create stores its tasks, and how the keyed creates (keystore) store theirs in their own
// transaction, after the keys' buckets.
func InsertTasks(ctx context.Context, tx mysql.Conn, tasks []exactlyonce.NewTask, ids []int64) ([]exactlyonce.CreatedTask, error) {
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
	positions, heads, err := advanceTaskBuckets(ctx, tx, counts, hashes)
	if err != nil {
		return nil, err
	}
	open, err := lockHeads(ctx, tx, hashes, heads)
	if err != nil {
		return nil, err
	}
	before := maps.Clone(positions)
	out := make([]exactlyonce.CreatedTask, len(tasks))
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
		out[i] = exactlyonce.CreatedTask{ID: r.id, Head: r.state == exactlyonce.Pending}
	}
	if err := insertTasks(ctx, tx, rows); err != nil {
		return nil, err
	}
	// The references' directories, logged in the same transaction (directory.go: the sweeper moves
	// them into their cells).
	if err := logDirectory(ctx, tx, taskEntries(rows)); err != nil {
		return nil, err
	}
	// Every compactEvery positions of a bucket, the create that passes the mark compacts the
	// bucket's log into its cells: what a read of the log scans stays bounded whether or not a
	// sweeper runs (the sweeper's compaction tidies the rest).
	var full []int64
	for b, from := range before {
		if from/compactEvery != positions[b]/compactEvery {
			full = append(full, slotsOfBucket(b)...)
		}
	}
	if len(full) > 0 {
		slices.Sort(full)
		if _, err := compactSlots(ctx, tx, full); err != nil {
			return nil, err
		}
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

func insertTasks(ctx context.Context, tx mysql.Conn, rows []taskRow) error {
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
		q := strings.Replace(queries.InsertTaskRows, "/*rows*/",
			strings.TrimSuffix(strings.Repeat("(?, 'task', ?, ?, NOW(6), ?, ?, ?, ?, ?), ", len(chunk)), ", "), 1)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// lockTaskBucketsOnly locks the buckets without taking positions from them (a manual retry, before
// it knows whether it goes to the end): one statement.
func lockTaskBucketsOnly(ctx context.Context, tx *sql.Tx, buckets []int64) error {
	if len(buckets) == 0 {
		return nil
	}
	buckets = mysql.Unique(buckets)
	slices.Sort(buckets)
	q, args := mysql.ExpandIDs(queries.LockTaskBuckets, buckets)
	_, err := tx.ExecContext(ctx, q, args...)
	return err
}

// advanceTaskBuckets locks the buckets and advances each one's sequence by its count, in one
// statement (AdvanceTaskBuckets), then reads in one more (BucketsAndHeads) each sequence as it was
// before, from which the tasks take the positions after it, and the open tasks (heads) of the
// references (hashes).
func advanceTaskBuckets(ctx context.Context, tx mysql.Conn, counts map[int64]int64, hashes map[string]uint32) (map[int64]int64, map[string][]int64, error) {
	if len(counts) == 0 {
		return map[int64]int64{}, map[string][]int64{}, nil
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
	q, ids := mysql.ExpandIDs(strings.Replace(queries.AdvanceTaskBuckets, "/*cases*/",
		strings.TrimSuffix(strings.Repeat("WHEN ? THEN ? ", len(buckets)), " "), 1), buckets)
	if _, err := tx.ExecContext(ctx, q, append(args, ids...)...); err != nil {
		return nil, nil, err
	}
	q, ids = mysql.ExpandIDs(queries.BucketsAndHeads, buckets)
	q, refs := refArgs(q, hashes)
	positions, heads, err := scanBucketsAndHeads(tx.QueryContext(ctx, q, append(ids, refs...)...))
	if err != nil {
		return nil, nil, err
	}
	if len(positions) != len(buckets) {
		return nil, nil, fmt.Errorf("task_buckets holds %d of the %d buckets asked for: the table was changed by hand", len(positions), len(buckets))
	}
	for b, n := range counts {
		positions[b] -= n
	}
	return positions, heads, nil
}

// scanBucketsAndHeads reads the rows of BucketsAndHeads (or OpenHeads): bucket sequences, and the
// ids of the references' open tasks.
func scanBucketsAndHeads(rows *sql.Rows, err error) (map[int64]int64, map[string][]int64, error) {
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	positions, heads := map[int64]int64{}, map[string][]int64{}
	for rows.Next() {
		var part, n, pos int64
		var ref sql.NullString
		if err := rows.Scan(&part, &n, &pos, &ref); err != nil {
			return nil, nil, err
		}
		if part == 0 {
			positions[n] = pos
		} else {
			heads[ref.String] = append(heads[ref.String], n)
		}
	}
	return positions, heads, rows.Err()
}

// openHeads reads the open tasks (heads) of the references.
func openHeads(ctx context.Context, tx mysql.Conn, hashes map[string]uint32) (map[string][]int64, error) {
	q, args := refArgs(queries.OpenHeads, hashes)
	_, heads, err := scanBucketsAndHeads(tx.QueryContext(ctx, q, args...))
	return heads, err
}

// lockHeads locks the open tasks (heads) of the references, as read (heads), and tells which of the
// references have one once they are locked. A head settled while LockHeads waited for it is not open
// any more: the references whose heads were just locked are read again, and a head promoted in the
// meantime is locked in turn, until every head read is one this transaction holds (each round
// follows a settlement, so it ends). No head can appear otherwise: a create or retry that makes one
// needs the reference's bucket, which the caller holds.
func lockHeads(ctx context.Context, tx mysql.Conn, hashes map[string]uint32, heads map[string][]int64) (map[string]bool, error) {
	locked := map[int64]bool{}
	for {
		var ids []int64
		again := map[string]uint32{}
		for ref, hs := range heads {
			for _, id := range hs {
				if !locked[id] {
					ids = append(ids, id)
					again[ref] = hashes[ref]
				}
			}
		}
		if len(ids) == 0 {
			open := map[string]bool{}
			for ref, hs := range heads {
				open[ref] = len(hs) > 0
			}
			return open, nil
		}
		slices.Sort(ids)
		q, args := mysql.ExpandIDs(queries.LockHeads, ids)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return nil, err
		}
		for _, id := range ids {
			locked[id] = true
		}
		fresh, err := openHeads(ctx, tx, again)
		if err != nil {
			return nil, err
		}
		for ref := range again {
			heads[ref] = fresh[ref]
		}
	}
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
	q = strings.Replace(q, "/*hashes*/", mysql.Placeholders(len(hs)), 1)
	q = strings.Replace(q, "/*refs*/", mysql.Placeholders(len(refs)), 1)
	return q, append(hs, refs...)
}
