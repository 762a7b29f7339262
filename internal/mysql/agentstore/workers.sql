-- Event workers (migrations/0010_event_workers.sql): the EventService's registry. Locks are taken
-- in one order everywhere: task rows (events) first, then event_workers rows, the latter by
-- UPDATEs whose semi-consistent read at READ COMMITTED waits only for the rows they name. One
-- exception, which cannot deadlock: a settlement locks the queued tasks it promotes after its
-- workers (PromoteQueued, sql/tasks.sql), and no transaction holding a queued task's row ever
-- waits for an event worker's.
--
-- An assignment (InsertWorker, GrowWorkers) is written in the transaction of the claim that leased
-- its tasks, after the leases, which name the tasks' workers themselves (eventstore's Lease); the
-- assignment of the tasks a settlement hands on to its
-- claim behind a full worker (InsertWorker, GrowWorkers; the promotion names their worker) in the
-- settlement's, after its SettleWorkers: the EventService drafts both under its lock, which it takes
-- before the transaction begins. Such a settlement locks workers in two statements, its heads'
-- then the drafted ones (all live workers of its own agent with room); two settlements of
-- different agents, each settling a task of a worker of the other's that the other's drafts grow,
-- can deadlock: InnoDB detects it and the loser runs again (inTx), as for any deadlock. A registry
-- of its own (a WorkerStore the stores do not write) writes each assignment in a transaction of
-- its own (AssignWorkers).
--
-- A full worker (will_terminate, set once it holds max_reference_count references, or when its
-- agent leaves) takes no new task: once full it no longer accepts new events and completes those it
-- holds. GrowWorkers refuses to grow one, and a settlement promotes the next task of a reference
-- into its head's worker only if that worker has room, decided on the worker's row under its lock
-- (SettleWorkers, then WorkersWithRoom). So a full worker's tasks only settle, and it is done once
-- they have. Every
-- statement on live workers says `is_done = 0`, which prunes to the `active` partition: its cost
-- is the number of live event workers, not the history
-- (TestLiveEventWorkerStatementsReadOnlyTheActivePartition checks it with EXPLAIN).

-- name: InsertWorker
-- New event workers, in the assignment's transaction (the claim's, or the settlement's), one
-- statement for all of them (no lock beyond the new rows'): /*rows*/ is one
-- (?, ?, NOW(6), NULL, 0, ?, 0, 0, ?, 0, ?, ?, ?, NULL) per worker (id, agent, will_terminate, max
-- references, reference count, references as JSON, first reference's hash). A new worker the same
-- assignment grows is inserted with room (will_terminate 0), and GrowWorkers, which grows no full
-- worker, makes it full.
INSERT INTO event_workers (worker_id, agent_id, created_at, last_completed_task, tasks_remaining, will_terminate,
  tasks_completed, tasks_failed, max_reference_count, is_done, reference_count, reference_ids, first_hash, done_at)
VALUES /*rows*/;

-- name: AssignTasks
-- Names the event worker of each task leased to a claim, in an assignment's own transaction
-- (AssignWorkers: a claim's lease names its drafted tasks' workers itself), one statement for all
-- its workers: /*cases*/ is `WHEN id IN (...) THEN ?` per worker (its tasks' ids,
-- its id). Guarded by the lease (`state = 1 AND claim_id = ?`, which prunes to `open`): a task whose
-- lease was taken over is not assigned. Locks the tasks, which the claim holds anyway.
UPDATE events SET worker_id = CASE /*cases*/ END WHERE state = 1 AND claim_id = ? AND id IN (/*ids*/) LIMIT ?;

-- name: GrowWorkers
-- An assignment adds tasks (and maybe references) to live workers, one statement for all of them:
-- each one's remaining count grows by its tasks, its references are the owner's list, will_terminate
-- is set once it holds its maximum (each /*name*/ is `WHEN ? THEN ?` per worker: its id, its
-- value). Guarded by the agent: only the agent that runs a worker adds to it (an agent that was
-- ejected and whose worker another adopted finds it no longer its own); and by `will_terminate =
-- 0`: a worker already full takes nothing more (the EventService never asks it to; this makes it a
-- rule of the registry). The caller checks that it changed every worker named (each grows by at
-- least one task) and else names the one that is not its (WorkersOfAgent). Locks the workers' rows
-- until the assignment commits; a settlement of the same worker waits, and then sees the worker as
-- this assignment left it.
UPDATE event_workers SET tasks_remaining = tasks_remaining + CASE worker_id /*add*/ END,
  reference_ids = CASE worker_id /*refs*/ END, reference_count = CASE worker_id /*count*/ END,
  will_terminate = GREATEST(will_terminate, CASE worker_id /*will*/ END)
WHERE is_done = 0 AND will_terminate = 0 AND agent_id = ? AND worker_id IN (/*ids*/);

-- name: WorkersOfAgent
-- An assignment whose GrowWorkers changed fewer workers than it named (it is rolled back): which
-- of them can still grow, a consistent read of the `active` partition, so that the others are named
-- in the conflict. No lock.
SELECT worker_id FROM event_workers WHERE is_done = 0 AND will_terminate = 0 AND agent_id = ? AND worker_id IN (/*ids*/);

-- name: SettleWorkers
-- A settlement's bookkeeping, in the transaction that settles the tasks, one statement for every
-- worker the settlement touches: completed and failed counts, remaining (minus the tasks settled for
-- good, plus the queued tasks to be promoted into it, /*promoted*/, if it has room), last completed
-- task; a willTerminate worker left with nothing becomes done (and moves to the `done` partition).
-- Each /*name*/ is `WHEN ? THEN ?` per worker (its id, its value); /*ids*/ the workers. The
-- assignments are evaluated left to right (MySQL and MariaDB alike): is_done reads tasks_remaining
-- before it changes, done_at the new is_done.
--
-- Locks the named workers' rows, in scan order, the same for every settlement, so two settlements
-- sharing workers queue rather than deadlock; the task rows were locked first (LockLeased). It runs
-- before the promotion, and the lock is why: whether a worker has room (will_terminate = 0) is
-- decided here, on the row as the last assignment or stop that touched it committed it (one still
-- in flight holds the row, and this waits for it), and stays so until this settlement commits: the
-- promoted tasks' count goes to a worker with room only, and WorkersWithRoom reads the same rows
-- again for the promotion. A full worker gets nothing, so it is done once its own tasks are.
UPDATE event_workers
SET is_done = IF(will_terminate = 1 AND tasks_remaining + CASE worker_id /*remaining*/ END <= 0, 1, 0),
    done_at = IF(is_done = 1, NOW(6), NULL),
    tasks_completed = tasks_completed + CASE worker_id /*completed*/ END,
    tasks_failed = tasks_failed + CASE worker_id /*failed*/ END,
    tasks_remaining = tasks_remaining + CASE worker_id /*remaining*/ END
      + IF(will_terminate = 0, CASE worker_id /*promoted*/ END, 0),
    last_completed_task = COALESCE(CASE worker_id /*last*/ ELSE NULL END, last_completed_task)
WHERE is_done = 0 AND worker_id IN (/*ids*/);

-- name: WorkersWithRoom
-- A drafting settlement, after SettleWorkers: which of its heads' workers that are not its
-- EventService's own take the tasks promoted behind those heads (the draft must know which tasks
-- join none before the promotion), the live ones that are not full. A consistent read of the
-- `active` partition, of rows SettleWorkers has just locked: no other transaction can have changed
-- them since, so it reads what SettleWorkers decided on. No lock of its own. The room of the
-- settling EventService's own workers is its guess, checked in the promotion (WorkerIfRoom); a
-- worker it knows to be full (exactlyonce.DraftWorkers.Room: it made it full, or read it so, in a
-- transaction that committed, and nothing clears will_terminate) has none, and the settlement
-- counts no promoted task for it.
SELECT worker_id FROM event_workers WHERE is_done = 0 AND will_terminate = 0 AND worker_id IN (/*ids*/);

-- name: WorkerIfRoom
-- Not a statement: the scalar subquery by which a settlement's promotion (taskstore's PromoteQueued,
-- /*worker*/) names a promoted task's worker only if that worker has room: the worker, if it is
-- live and not full, else NULL (the task joins none). The row was locked by SettleWorkers earlier in
-- the same transaction, so it is read as SettleWorkers decided on it, and the promoted count
-- SettleWorkers gave it (if it has room) matches. A subquery of an UPDATE at READ COMMITTED is a
-- consistent read (InnoDB takes no lock for it), so it waits for no other worker's row. Uncorrelated:
-- evaluated once per worker named, not per task.
SELECT worker_id FROM event_workers WHERE is_done = 0 AND will_terminate = 0 AND worker_id = ?;

-- name: ActiveWorkers
-- The live event workers (recovery at every pulse; GET /workers?active=true): a consistent read of
-- the `active` partition, no lock.
SELECT worker_id, agent_id, created_at, last_completed_task, tasks_remaining, will_terminate, tasks_completed,
  tasks_failed, max_reference_count, is_done, reference_ids, first_hash
FROM event_workers WHERE is_done = 0 ORDER BY created_at, worker_id;

-- name: DoneWorkers
-- GET /workers?active=false: the done workers kept for audit, newest first. A consistent read of
-- the `done` partition, which WORKER_RETENTION's pruning bounds; no lock.
SELECT worker_id, agent_id, created_at, last_completed_task, tasks_remaining, will_terminate, tasks_completed,
  tasks_failed, max_reference_count, is_done, reference_ids, first_hash
FROM event_workers WHERE is_done = 1 ORDER BY done_at DESC, worker_id LIMIT ?;

-- name: WorkerByID
-- GET /workers/{workerId}: one worker, active or done. A consistent read; no partition pruned
-- (a worker may be in either), so its cost is the live workers plus the retained history. The id
-- is the caller's and compared as bytes, as Go compares it: the column has the database's default
-- collation, which ignores case (and, on MariaDB, trailing spaces), so `worker_id = ?` answered
-- "W_AB" with worker "w_ab". (The other statements compare ids the EventService made, "w_" and
-- lowercase hex, which no collation folds together.)
SELECT worker_id, agent_id, created_at, last_completed_task, tasks_remaining, will_terminate, tasks_completed,
  tasks_failed, max_reference_count, is_done, reference_ids, first_hash
FROM event_workers WHERE CAST(worker_id AS BINARY) = ? LIMIT 1;

-- name: AdoptWorker
-- Recovery: a surviving agent takes over a live worker whose agent is gone. Guarded by the old
-- agent's id, so that of two agents adopting one worker at once only the first changes the row (the
-- second's UPDATE waits for the first's lock, then no longer matches). Locks the worker's row.
UPDATE event_workers SET agent_id = ? WHERE is_done = 0 AND worker_id = ? AND agent_id = ? LIMIT 1;

-- name: StopWorkers
-- An agent leaving (a Lambda's deadline, SIGTERM) marks its workers willTerminate; those with
-- nothing left become done at once, the others are left for adoption. Locks the named rows.
UPDATE event_workers
SET will_terminate = 1, is_done = IF(tasks_remaining <= 0, 1, 0), done_at = IF(is_done = 1, NOW(6), NULL)
WHERE is_done = 0 AND worker_id IN (/*ids*/);

-- name: WorkerHeads
-- Recovery's refill: the open heads (pending or processing) of an adopted worker's references, in
-- their order; the queued tasks behind them are promoted into the worker as each head settles.
-- `state < 2` prunes to `open`, whose size is the backlog, not the history. No lock.
SELECT id FROM events WHERE state < 2 AND worker_id = ? ORDER BY position, id;

-- name: PruneWorkers
-- Deletes done workers older than WORKER_RETENTION, at most ? at a time. The `done` partition only;
-- locks the rows it deletes, which nothing else writes.
DELETE FROM event_workers WHERE is_done = 1 AND done_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?;
