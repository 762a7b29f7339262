package taskstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// The order of a reference's tasks rests on its head's lock (tasks.sql): a
// settlement locks the head it settles before it reads the reference's queue, and a create that
// queues a task behind a head locks that head first. These tests hold a head's lock from a
// transaction of their own, as the other side would, at the moment that matters.

// awaitStatement waits until a statement that starts with prefix runs on this test's database (the
// call under test has reached the lock the test holds, and waits for it there), or fails the test
// if the call returned first. (The processlist is built when it is read; INNODB_TRX is a cache that
// tests polling it side by side keep stale: see mysqltest.WaitsForALock.)
func awaitStatement(t *testing.T, db *sql.DB, prefix string, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND INFO LIKE CONCAT(?, '%')`, prefix).Scan(&n))
		if n > 0 {
			return
		}
		select {
		case <-done:
			t.Fatalf("the call returned without running %q", prefix)
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("%q did not run within 30 s", prefix)
}

func refTask(ref string, i int) exactlyonce.NewTask {
	return exactlyonce.NewTask{URL: "https://example.com/hook", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), ReferenceID: ref, MaxRetries: 3}
}

// leasedHead returns a new database and its store holding one task of reference "r", its head,
// leased to claim c.
func leasedHead(ctx context.Context, t *testing.T) (*sql.DB, *wire.Stores, exactlyonce.Claim, exactlyonce.Event) {
	t.Helper()
	db, store := dbWithStores(t, 8)
	created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask("r", 1)})
	require.NoError(t, err)
	require.True(t, created[0].Head)
	c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
	claimed, err := store.Events.ClaimIDs(ctx, c, []int64{created[0].ID}, mysqltest.LeaseAll)
	require.NoError(t, err)
	require.Len(t, claimed.Leased, 1)
	return db, store, c, claimed.Leased[0]
}

// A create that finds the reference's head being settled waits for the settlement; when the
// settlement promoted nothing (the head was the reference's last task), the new task is the head,
// not queued behind a task that is gone (where it would wait for ever).
func TestACreateBehindAHeadBeingSettledWaitsAndBecomesTheHead(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, store, c, head := leasedHead(ctx, t)

	// A settlement of the head, by hand: lock it (as LockLeased does), settle it, promote nothing.
	settle, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer settle.Rollback()
	_, err = settle.ExecContext(ctx, `UPDATE events SET claim_id = claim_id WHERE state = 1 AND claim_id = ? AND id = ?`, c.ID, head.ID)
	require.NoError(t, err)

	done := make(chan struct{})
	var second []exactlyonce.CreatedTask
	var createErr error
	go func() {
		defer close(done)
		second, createErr = store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask("r", 2)})
	}()
	awaitStatement(t, db, "UPDATE events SET position = position", done)
	_, err = settle.ExecContext(ctx, `UPDATE events SET state = ?, processed_at = NOW(6), value = 'HTTP 200' WHERE id = ?`,
		exactlyonce.Processed, head.ID)
	require.NoError(t, err)
	require.NoError(t, settle.Commit())
	<-done
	require.NoError(t, createErr)
	require.True(t, second[0].Head, "the task behind a head settled meanwhile heads its reference")
	e, err := store.Events.Get(ctx, second[0].ID)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, e.State, "pending, so that a worker finds it")
}

// A settlement waits for a create that is queueing a task behind the head it settles, and then
// promotes that task: the create's task is not left queued behind a settled head.
func TestASettlementWaitsForACreateQueueingBehindItsHead(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, store, c, head := leasedHead(ctx, t)

	// A create, by hand, that has locked the head and queued a task behind it, not committed yet.
	create, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer create.Rollback()
	_, err = create.ExecContext(ctx, `UPDATE events SET position = position WHERE state < 2 AND id = ?`, head.ID)
	require.NoError(t, err)
	const queuedID = 1 << 40
	_, err = create.ExecContext(ctx, `INSERT INTO events (id, kind, routing_hash, state, created_at, url, payload, reference_id, max_retries, position)
		VALUES (?, 'task', ?, 2, NOW(6), 'https://example.com/hook', '{}', 'r', 3, ?)`, queuedID, taskstore.ReferenceHash("r"), head.Task.Position+1)
	require.NoError(t, err)

	done := make(chan struct{})
	var settled exactlyonce.TaskSettlement
	var settleErr error
	go func() {
		defer close(done)
		settled, settleErr = store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: head, Delivered: true,
			Attempt: exactlyonce.Attempt{Number: 1, Started: time.Now(), Status: 200}}}, true)
	}()
	awaitStatement(t, db, "UPDATE events SET claim_id = claim_id", done)
	require.NoError(t, create.Commit())
	<-done
	require.NoError(t, settleErr)
	require.Equal(t, []int64{head.ID}, settled.Completed)
	require.Len(t, settled.Next, 1, "the settlement handed the reference on to the task queued meanwhile")
	require.Equal(t, int64(queuedID), settled.Next[0].ID)
}

// headInWorker is leasedHead's head, assigned to a new event worker w with room (as an
// EventService assigns a claimed task), and n tasks of its reference queued behind it. It returns
// the head as the engine holds it (its worker named) and the queued tasks' ids.
func headInWorker(ctx context.Context, t *testing.T, w string, n int) (*sql.DB, *wire.Stores, exactlyonce.Claim, exactlyonce.Event, []int64) {
	t.Helper()
	db, store, c, head := leasedHead(ctx, t)
	require.NoError(t, store.Agents.AssignWorkers(ctx, c.ID, 1, exactlyonce.WorkerAssignment{
		New:   []exactlyonce.EventWorker{{ID: w, AgentID: 1, MaxReferenceCount: 2}},
		Grow:  []exactlyonce.WorkerGrowth{{ID: w, AddTasks: 1, References: []string{"r"}}},
		Tasks: map[string][]int64{w: {head.ID}},
	}))
	head.Task.WorkerID = w
	var queued []int64
	for i := range n {
		got, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask("r", 2+i)})
		require.NoError(t, err)
		require.False(t, got[0].Head)
		queued = append(queued, got[0].ID)
	}
	return db, store, c, head, queued
}

// A settlement, the assignment that fills its head's event worker, and a create of the same
// reference, at once, in this order: the assignment holds the worker's row (it has just marked it
// full, not committed yet); the settlement has locked and settled the head and waits for the
// worker's row; the create waits for the head. When the assignment commits, the settlement sees the
// worker full: the next task of the reference is promoted (and leased, to be delivered next) into
// no worker, for the engine's EventService to give it one with room, and the full worker, left with
// nothing, is done. The create then queues its task behind the promoted one. Order and
// exactly-once hold: one open task, the rest queued in creation order, and a second settlement of
// the head settles nothing.
func TestASettlementPromotesIntoNoFullWorkerWhileACreateWaits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, store, c, head, queued := headInWorker(ctx, t, "w_filling", 1)

	// The assignment that fills the worker, by hand: GrowWorkers' lock and change, not committed.
	fill, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer fill.Rollback()
	_, err = fill.ExecContext(ctx, `UPDATE event_workers SET will_terminate = 1, reference_count = 2, reference_ids = '["r","other"]'
		WHERE is_done = 0 AND worker_id = 'w_filling'`)
	require.NoError(t, err)

	settled := make(chan struct{})
	var settlement exactlyonce.TaskSettlement
	var settleErr error
	go func() {
		defer close(settled)
		settlement, settleErr = store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: head, Delivered: true,
			Attempt: exactlyonce.Attempt{Number: 1, Started: time.Now(), Status: 200}}}, true)
	}()
	awaitStatement(t, db, "UPDATE event_workers", settled)

	created := make(chan struct{})
	var late []exactlyonce.CreatedTask
	var createErr error
	go func() {
		defer close(created)
		late, createErr = store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{refTask("r", 9)})
	}()
	awaitStatement(t, db, "UPDATE events SET position = position", created)

	require.NoError(t, fill.Commit())
	<-settled
	require.NoError(t, settleErr)
	require.Equal(t, []int64{head.ID}, settlement.Completed)
	require.Len(t, settlement.Next, 1, "the reference's next task is handed on")
	require.Equal(t, queued[0], settlement.Next[0].ID)
	require.Empty(t, settlement.Next[0].Task.WorkerID, "not into the worker that is full")
	<-created
	require.NoError(t, createErr)
	require.False(t, late[0].Head, "queued behind the promoted task")

	w, found, err := store.Agents.Worker(ctx, "w_filling")
	require.NoError(t, err)
	require.True(t, found)
	require.True(t, w.WillTerminate)
	require.True(t, w.IsDone, "the full worker's own task is settled: it is done")
	require.Equal(t, int64(1), w.TasksCompleted)
	require.Zero(t, w.TasksRemaining)

	again, err := store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: head, Delivered: true,
		Attempt: exactlyonce.Attempt{Number: 1, Started: time.Now(), Status: 200}}}, true)
	require.NoError(t, err)
	require.Empty(t, again.Completed, "settled once")
	require.Empty(t, again.Next)
	listed, err := store.Tasks.ReferenceTasks(ctx, "r", 0, 10)
	require.NoError(t, err)
	require.Len(t, listed, 3)
	require.Equal(t, []int64{head.ID, queued[0], late[0].ID}, []int64{listed[0].ID, listed[1].ID, listed[2].ID}, "creation order")
	require.Equal(t, []exactlyonce.State{exactlyonce.Processed, exactlyonce.Processing, exactlyonce.Queued},
		[]exactlyonce.State{listed[0].State, listed[1].State, listed[2].State})
}

// The other order: a create that has locked the head of a full worker and queued a task behind
// it, not committed, when the settlement starts. The settlement waits for it, then promotes that
// task, into no worker (its head's is full), pending for any worker (without chaining); the full
// worker is done.
func TestASettlementWaitsForACreateAndPromotesIntoNoFullWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, store, c, head, _ := headInWorker(ctx, t, "w_full", 0)
	_, err := db.ExecContext(ctx, `UPDATE event_workers SET will_terminate = 1 WHERE worker_id = 'w_full'`)
	require.NoError(t, err)

	create, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer create.Rollback()
	_, err = create.ExecContext(ctx, `UPDATE events SET position = position WHERE state < 2 AND id = ?`, head.ID)
	require.NoError(t, err)
	const queuedID = 1 << 40
	_, err = create.ExecContext(ctx, `INSERT INTO events (id, kind, routing_hash, state, created_at, url, payload, reference_id, max_retries, position)
		VALUES (?, 'task', ?, 2, NOW(6), 'https://example.com/hook', '{}', 'r', 3, ?)`, queuedID, taskstore.ReferenceHash("r"), head.Task.Position+1)
	require.NoError(t, err)

	done := make(chan struct{})
	var settled exactlyonce.TaskSettlement
	var settleErr error
	go func() {
		defer close(done)
		settled, settleErr = store.Tasks.SettleTasks(ctx, c, []exactlyonce.TaskOutcome{{Event: head, Delivered: true,
			Attempt: exactlyonce.Attempt{Number: 1, Started: time.Now(), Status: 200}}}, false)
	}()
	awaitStatement(t, db, "UPDATE events SET claim_id = claim_id", done)
	require.NoError(t, create.Commit())
	<-done
	require.NoError(t, settleErr)
	require.Equal(t, []int64{head.ID}, settled.Completed)
	e, err := store.Events.Get(ctx, queuedID)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, e.State, "promoted, for any worker")
	var worker sql.NullString
	require.NoError(t, db.QueryRowContext(ctx, "SELECT worker_id FROM events WHERE id = ?", queuedID).Scan(&worker))
	require.False(t, worker.Valid, "in no worker: its head's is full (%q)", worker.String)
	w, _, err := store.Agents.Worker(ctx, "w_full")
	require.NoError(t, err)
	require.True(t, w.IsDone)
	require.Equal(t, int64(1), w.TasksCompleted)
	require.Zero(t, w.TasksRemaining)
}

// A settlement locks only the rows of its own claim: the rows of other claims that its scan passes
// (every statement scans the subpartitions of its ids) it neither waits for nor keeps. The tasks
// benchmark's deadlocks were this: a settlement's locking read waited for a row another claim's
// transaction held, then kept that row's lock until it committed (InnoDB keeps the lock of a row a
// locking read had to wait for, matching or not), went on to the next subpartition and waited
// there for a row of that other claim's next transaction (its event worker's assignment, or its
// lease), which then asked for the row the settlement kept. Here by hand: claim Y's task y1 is
// held by one of Y's transactions (its settlement, say), y2 by another (its assignment); claim X
// settles x1 and x2, which share y1's and y2's subpartitions, after them in scan order, and must
// finish while both of Y's transactions stay open. Its sessions give up on a row lock after one
// second and it is not run again, so a wait for y1 or y2 (which nobody releases before it ends)
// fails it with a lock wait timeout: LockLeased as the old locking read fails here in about 1 s.
//
// The test does not look for a wait in InnoDB's status, as it did: an UPDATE whose scan passes a
// row another transaction holds is listed there in LOCK WAIT while it reads that row's last
// committed version (InnoDB queues its request for the lock, reads, then withdraws the request),
// though it never waits. A sample taken in that moment counted as a wait, and the test then
// committed Y's settlement inside it, when InnoDB grants the request and the settlement keeps y1
// until it commits (the residual in performance.md's ordered rounds): a rare failure, 8 runs in 10
// when Y's rows were given long histories to read.
func TestASettlementWaitsForNoRowOfAnotherClaim(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, dsn := testdb.DB(t, 8)
	store := storesOn(t, db)
	tasks := make([]exactlyonce.NewTask, 16)
	for i := range tasks {
		tasks[i] = exactlyonce.NewTask{URL: "https://example.com/hook", Payload: json.RawMessage(`{}`), MaxRetries: 3}
	}
	created, err := store.Tasks.CreateTasks(ctx, tasks)
	require.NoError(t, err)
	// events is subpartitioned by id MOD 8, and a scan reads the subpartitions in order, each's rows
	// in the order they were inserted (the order of the ids here). y1 and x1 share the first
	// subpartition, y2 and x2 a later one; the ys come first in theirs.
	var y1, y2, x1, x2 int64
	for _, a := range created[:8] {
		for _, b := range created[8:] {
			if a.ID%8 != b.ID%8 {
				continue
			}
			if y1 == 0 || a.ID%8 < y1%8 {
				y1, x1 = a.ID, b.ID
			}
			if y2 == 0 || a.ID%8 > y2%8 {
				y2, x2 = a.ID, b.ID
			}
		}
	}
	require.True(t, y1 != 0 && y2 != 0 && y1%8 < y2%8, "ids %v: no two pairs sharing subpartitions", created)
	lease := func(ids ...int64) (exactlyonce.Claim, []exactlyonce.Event) {
		c := exactlyonce.Claim{ID: exactlyonce.NewClaimID(), By: "worker", Lease: time.Minute}
		claimed, err := store.Events.ClaimIDs(ctx, c, ids, mysqltest.LeaseAll)
		require.NoError(t, err)
		require.Len(t, claimed.Leased, len(ids))
		return c, claimed.Leased
	}
	cy, _ := lease(y1, y2)
	cx, xs := lease(x1, x2)

	begin := func() *sql.Tx {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		require.NoError(t, err)
		return tx
	}
	// Claim Y's settlement, by hand: it has locked y1.
	settleY := begin()
	defer settleY.Rollback()
	_, err = settleY.ExecContext(ctx, `UPDATE events SET claim_id = claim_id WHERE state = 1 AND claim_id = ? AND id = ?`, cy.ID, y1)
	require.NoError(t, err)
	// Claim Y's assignment, by hand (agentstore's AssignTasks): it has named y2's event worker.
	assignY := begin()
	defer assignY.Rollback()
	_, err = assignY.ExecContext(ctx, `UPDATE events SET worker_id = 'w_y' WHERE state = 1 AND claim_id = ? AND id IN (?)`, cy.ID, y2)
	require.NoError(t, err)

	// Claim X's settlement, on stores of their own whose sessions wait at most 1 s for a row lock,
	// with no second attempt. Not 0, though MariaDB takes it: an UPDATE's semi-consistent read
	// queues a lock request before it reads the committed version, and with 0 that request times
	// out at once (seen: the settlement fails with 1205 on the code that waits for no row).
	cfg, err := drv.ParseDSN(dsn)
	require.NoError(t, err)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["innodb_lock_wait_timeout"] = "1"
	impatient, err := mysql.Open(mysql.ConnConfig{DSN: cfg.FormatDSN(), MaxOpenConns: 2})
	require.NoError(t, err)
	defer impatient.Close()
	settler, err := wire.StoresOn(impatient, mysql.Config{Retry: mysql.RetryPolicy{MaxAttempts: 1}})
	require.NoError(t, err)
	var outcomes []exactlyonce.TaskOutcome
	for _, e := range xs {
		outcomes = append(outcomes, exactlyonce.TaskOutcome{Event: e, Delivered: true,
			Attempt: exactlyonce.Attempt{Number: 1, Started: time.Now(), Status: 200}})
	}
	settled, err := settler.Tasks.SettleTasks(ctx, cx, outcomes, false)
	require.False(t, mysql.IsLockWaitTimeout(err), "the settlement waited for a row of another claim: %v", err)
	require.NoError(t, err) // a deadlock too: it is not run again
	require.ElementsMatch(t, []int64{x1, x2}, settled.Completed)
}
