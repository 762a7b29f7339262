-- Tasks: events of kind 'task' that carry a webhook (migrations/0009_tasks.sql). A reference's
-- order is decided under two kinds of lock, always taken in this order: the reference's bucket
-- (LockTaskBuckets, AdvanceTaskBuckets), which serialises the creates and retries of one reference
-- and gives them positions; and its head, the reference's one open task (LockHeads; a settlement's LockLeased),
-- which a create locks before it queues a task behind it and a settlement locks before it promotes
-- the next. So a settlement never waits for a bucket: only for a create queueing behind the very
-- task it settles. A manual retry locks the failed tasks it retries before both (LockFailedTask,
-- LockFailedTasks), and nothing that holds a bucket or a head waits for a failed task's row.
--
-- reference_id is compared as bytes, CAST(reference_id AS BINARY), as Go compares references (maps,
-- the routing hash): the column's utf8mb4_bin collation ignores trailing spaces (PAD SPACE), so a
-- plain `reference_id = ?` took "r" and "r " for one reference whenever their routing hashes met
-- (murmur3 pairs are easy to make). The API refuses trailing spaces (exactlyonce.CheckPathName);
-- the cast keeps the references stored before apart. Every statement here scans anyway (no index),
-- so the cast costs no plan.

-- name: LockTaskBuckets
-- Locks the bucket of the reference a manual retry orders (it changes nothing: the lock is the
-- point). The table's 64 short rows are scanned once; the rows are locked in scan order, the same
-- for every transaction, so two transactions locking overlapping buckets queue rather than
-- deadlock. An UPDATE, not a SELECT ... FOR UPDATE: at READ COMMITTED an UPDATE's scan reads a row
-- another transaction holds semi-consistently (its last committed version) and passes it by if it
-- is not one of ours, where a locking SELECT waits for every row it passes; so a bucket lock waits
-- only for the same bucket, not for every bucket another transaction holds.
UPDATE task_buckets SET position = position WHERE bucket IN (/*ids*/);

-- name: AdvanceTaskBuckets
-- A create (or a retry to the end): locks the buckets of its references and advances each one's
-- sequence by the number of positions its tasks take from it, in one statement (/*cases*/ is one
-- `WHEN ? THEN ?` per bucket: the bucket, its count). The lock is LockTaskBuckets's: an UPDATE, which
-- waits only for the buckets named, taken in scan order. BucketsAndHeads reads the advanced
-- sequences next.
UPDATE task_buckets SET position = position + CASE bucket /*cases*/ ELSE 0 END WHERE bucket IN (/*ids*/);

-- name: BucketsAndHeads
-- A create's second statement: two reads in one round trip. Rows `0, bucket, position, NULL` are the
-- sequences of the buckets it has just advanced (a consistent read sees this transaction's own
-- change, and no other transaction can change a locked bucket); rows `1, id, 0, reference_id` are
-- the open tasks (pending or processing) of its references: their heads, which the create locks
-- (LockHeads) before it queues a task behind one. Read from `open` only: a reference with a queued
-- task always has an open head, as every transaction that leaves a task queued keeps or makes one: a
-- create queues a task only behind an open head, which it has locked; a settlement promotes the next
-- queued task in the transaction that settles the head; a retry in place requeues the pending head
-- behind the task it makes pending. So `open` answers alone, and a create does not scan the queue,
-- which is as long as the backlog (the tasks benchmark: 20,000 rows scanned per create, the
-- database's CPU the limit). /*ids*/, /*hashes*/ and /*refs*/ are expanded to one ? each.
SELECT 0, bucket, position, NULL FROM task_buckets WHERE bucket IN (/*ids*/)
UNION ALL
SELECT 1, id, 0, reference_id FROM events
WHERE state < 2 AND kind = 'task' AND routing_hash IN (/*hashes*/) AND CAST(reference_id AS BINARY) IN (/*refs*/);

-- name: OpenHeads
-- The open tasks (heads) of references, read again after LockHeads: a head that was settled while
-- LockHeads waited for it is not open any more, and the task its settlement promoted (if any) heads
-- the reference now. Also a manual retry's first look, before its bucket, at whether its
-- reference has an open task (RetryTask; retry.sql's RetryInPlaceCheck reads it again under the
-- bucket). Consistent read of `open` only; the same rows as BucketsAndHeads's second part.
SELECT 1, id, 0, reference_id FROM events
WHERE state < 2 AND kind = 'task' AND routing_hash IN (/*hashes*/) AND CAST(reference_id AS BINARY) IN (/*refs*/);

-- name: LockHeads
-- A create (or a retry to the end) locks the heads it will queue tasks behind, before it inserts
-- them: an UPDATE that changes nothing (the lock is the point, as LockTaskBuckets). This lock, not
-- the bucket's, is what a settlement waits for: it locks its heads (LockLeased) before it reads
-- the reference's queue, so every create that decided to queue behind one of them has committed by
-- then and its task is seen and promoted; a create that locks later waits here until the settlement
-- commits, passes the head (no longer open, so no longer matching), reads the heads again
-- (OpenHeads), and queues behind the promoted task, or becomes the head. `state < 2` prunes to
-- `open`; the UPDATE's semi-consistent read waits only for the rows named.
UPDATE events SET position = position WHERE state < 2 AND id IN (/*ids*/);

-- name: InsertTaskRows
-- Stores tasks, in the create's transaction: /*rows*/ is one (?, 'task', ?, ?, NOW(6), ?, ?, ?, ?, ?)
-- per task (id, routing hash, state, url, payload, reference, max retries, position). state is 0
-- (pending) for a task that heads its reference (or has none), 2 (queued) for one behind an open
-- task of its reference.
INSERT INTO events (id, kind, routing_hash, state, created_at, url, payload, reference_id, max_retries, position)
VALUES /*rows*/;

-- name: QueuedOfReferences
-- The queued tasks of the named references, to promote the first of each (the lowest position) when
-- the task before it settles. A consistent read of the `queued` partition only (`state = 2`), run
-- with the references' heads locked (LockLeased), so every create that queued a task behind one of
-- them has committed, and any other waits for this settlement. The last column says whether the
-- task is the frontier a bulk retry in parts holds (retry.sql's HoldRetried: not due before its hold
-- ends, not attempted since its retry, no error; no other queued task is all of these, a requeued
-- head that waited a backoff has an attempt since its retry and its error): it is promoted pending
-- and keeps its hold (PromoteQueued), never leased to the settling claim.
SELECT id, reference_id, position, COALESCE(next_attempt_at > NOW(6) AND retry_base = attempts AND last_error IS NULL, 0) FROM events
WHERE state = 2 AND routing_hash IN (/*hashes*/) AND CAST(reference_id AS BINARY) IN (/*refs*/);

-- name: LeasedAndQueued
-- A settlement of at most MarkChunk tasks in one round trip after its LockLeased: which of the
-- named tasks LockLeased has just locked (events.sql's LeasedIDs, the first part, tagged 0) and the
-- queued tasks of the references of all of them (QueuedOfReferences, tagged 1), as the settlement
-- would read them next. The same reads at the same point: each is a consistent read, and with the
-- heads locked nothing that queues a task behind one of them, or changes one queued there, can
-- commit before this transaction ends (a create and a retry's part lock the head first), so the
-- queue reads here as after the outcomes are written. The queues of references whose head the
-- settlement did not lock, or does not hand on, are read and dropped. In the tasks benchmark the
-- queue read finds nothing nearly every time (a client creates a reference's next task after its
-- last one was delivered): as its own statement it was a round trip in every settlement.
(SELECT 0, id, NULL, 0, 0 FROM events WHERE state = 1 AND claim_id = ? AND id IN (/*ids*/) LIMIT ?)
UNION ALL
SELECT 1, id, reference_id, position, COALESCE(next_attempt_at > NOW(6) AND retry_base = attempts AND last_error IS NULL, 0) FROM events
WHERE state = 2 AND routing_hash IN (/*hashes*/) AND CAST(reference_id AS BINARY) IN (/*refs*/);

-- name: PromoteQueued
-- Makes queued tasks pending: each heads its reference now, due at once (next_attempt_at now, so
-- that the sweeper's grace, meant for events the queue path has not had yet, does not hold them
-- back). Guarded by `state = 2`; the heads' locks (LockLeased) make it the only promotion of these
-- references in flight. Locks the promoted rows, after the event workers' rows the settlement
-- locked (SettleWorkers): no transaction that holds a queued task's row waits for an event worker's
-- (creates and retries touch no event worker), so the order cannot deadlock. /*worker*/ names each
-- promoted task's event worker: its reference's (the settled head's) if that event worker has room,
-- `CASE WHEN id = ? THEN ? ... ELSE worker_id END`, where the room is known (WorkersWithRoom read it, or
-- a drafted growth proved it), or `WHEN id IN (...) THEN (agentstore's WorkerIfRoom)` per worker, the
-- worker if it has room, else NULL, where the statement decides it (a consistent read of rows
-- SettleWorkers locked: no lock, no wait); or `worker_id` (NULL: a queued task has none) when none
-- has; a task promoted behind a full event worker joins none, and the EventService
-- of whoever delivers it gives it one with room: when the settlement hands it on to its own claim
-- (PromoteQueuedLeased), the settling EventService's draft, written in this transaction
-- (agentstore's WriteDraft), and named here in the same CASE. A bulk retry's held frontier
-- (QueuedOfReferences) keeps its hold: pending but not due, so that no claim starts it and nothing
-- behind it is promoted until the retry's next part moves on or the hold ends (retry.sql's
-- HoldRetried); next_attempt_at is the only column assigned from itself, and assigned last.
UPDATE events SET state = 0, worker_id = /*worker*/,
  next_attempt_at = IF(COALESCE(next_attempt_at > NOW(6) AND retry_base = attempts AND last_error IS NULL, 0), next_attempt_at, NOW(6))
WHERE state = 2 AND id IN (/*ids*/) LIMIT ?;

-- name: PromoteQueuedLeased
-- Like PromoteQueued, but leases the promoted tasks to the settling claim at once (state 1), so
-- that the process that delivered a reference's task goes on with the next one without claiming
-- again: the lease, as every lease, lets another claim take them over if this process dies.
-- /*worker*/ as PromoteQueued's. Never a bulk retry's held frontier: the settlement promotes the
-- ones it read held with PromoteQueued, and this guard, evaluated on the row once locked, leaves
-- queued one whose hold a retry's part renewed after the settlement read it (the settlement then
-- promotes it with PromoteQueued too).
UPDATE events SET state = 1, claim_id = ?, lease_expires_at = NOW(6) + INTERVAL ? MICROSECOND, next_attempt_at = NULL,
  worker_id = /*worker*/
WHERE state = 2 AND id IN (/*ids*/)
  AND NOT COALESCE(next_attempt_at > NOW(6) AND retry_base = attempts AND last_error IS NULL, 0) LIMIT ?;

-- name: LeasedTasks
-- The tasks just leased by PromoteQueuedLeased, to work them: `state = 1 AND claim_id = ?` prunes
-- to `open` and to the claim's rows.
SELECT id, kind, attempts, url, payload, reference_id, max_retries, routing_hash, position, worker_id, retry_base FROM events
WHERE state = 1 AND claim_id = ? AND id IN (/*ids*/);

-- name: SettleLeasedTasks
-- A task's settlement as completed: SettleLeased's (sql/events.sql), guarded and locked the same way
-- (LockLeased locked the rows), and the task's row then says how it ended: no last error and no
-- next attempt (the errors of the attempts before are in task_attempts, GET /events/{id}/attempts).
UPDATE events
SET value = CASE id /*cases*/ END,
    state = 10,
    processed_at = NOW(6),
    processed_by = ?,
    process_count = process_count + 1,
    lease_expires_at = NULL,
    last_error = NULL,
    next_attempt_at = NULL
WHERE state = 1 AND claim_id = ? AND id IN (/*ids*/)
LIMIT ?;

-- name: InsertAttempts
-- Records delivery attempts, in the transaction that records their outcome (the settlement or
-- the failure), only for the tasks whose lease that transaction found held: an attempt is recorded
-- once. /*rows*/ is one (?, ?, ?, ?, ?, ?, ?) per attempt.
INSERT INTO task_attempts (event_id, number, started_at, duration_us, status, error, claim_id) VALUES /*rows*/;

-- name: Attempts
-- GET /events/{id}/attempts: one task's attempts, pruned by HASH(event_id) to one partition. The
-- attempts of a packed task were moved into its page with it (sql/pages.sql, PackedAttempts): none
-- here, the store reads them there. So the table holds the attempts of the tasks not packed yet.
SELECT number, started_at, duration_us, status, COALESCE(error, '') FROM task_attempts
WHERE event_id = ? ORDER BY started_at, number;

-- name: AttemptsAfter
-- GET /events/{id}/attempts a page at a time: the task's attempts numbered after ?, up to ?, in
-- their order (numbers only grow: a manual retry keeps the attempts and numbers the next after
-- them). Pruned by HASH(event_id) to one partition, as Attempts.
SELECT number, started_at, duration_us, status, COALESCE(error, '') FROM task_attempts
WHERE event_id = ? AND number > ? ORDER BY number LIMIT ?;

-- name: ReferencePosition
-- The position of one task of a reference (the cursor of GET /references/{id}/events?after=), until
-- the reference directory is complete (directory.sql; after it, the directory says).
-- Pruned by id to one subpartition of each state partition. A task not found here may be packed
-- (tasks_retry.go reads its page then, sql/pages.sql).
SELECT position FROM events WHERE id = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ? LIMIT 1;

-- name: ReferenceTasks
-- GET /references/{id}/events until the reference directory is complete (directory.sql: after it,
-- the listing reads the reference's tasks by id): a reference's tasks in delivery order, after a position, of those
-- still in `events` (the packed ones come from PagesOfReference, sql/pages.sql, merged by the
-- store). No partition is pruned: it scans what `events` holds, which the pack keeps to the pending
-- set, what is not packed yet and the failed events; routing_hash is compared first, so most rows
-- are rejected on an integer.
SELECT id, state, position, attempts, created_at, processed_at FROM events
WHERE routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ? AND position > ?
ORDER BY position LIMIT ?;

-- name: LockFailedTask
-- A manual retry: locks the task, if it is failed (20, or 40 once counted). Pruned by id to one
-- subpartition of `fresh` and `failed`. Run before its bucket's lock: every manual retry locks its
-- failed tasks first, and nothing that holds a bucket waits for a failed task's row (creates,
-- settlements and the backfill never lock one), so the order cannot deadlock.
SELECT state, COALESCE(reference_id, ''), routing_hash, COALESCE(position, 0) FROM events
WHERE id = ? AND kind = 'task' AND state IN (20, 40) FOR UPDATE;

-- name: TaskOf
-- A manual retry, first statement: is the event a task, and what is its reference (whose bucket is
-- locked next). Consistent read, pruned by id. Not found: the store reads its page (a packed event
-- is processed, so not retried) before it answers "not found". Also a read of attempts that found
-- none in task_attempts, after that read: a task still here has none to read in its page, so its
-- page (maybe an archived page's object) is not asked.
SELECT kind, state, reference_id, routing_hash FROM events WHERE id = ? LIMIT 1;

-- name: LaterTaskStarted
-- A manual retry, until the reference directory is complete (directory.sql's TasksStarted after
-- it): has a task of the reference after this one started (settled, processing, or
-- attempted, ever: a manual retry keeps a task's attempts)? Then the retried task goes to the end of its reference's queue, else back in its
-- place. Scans every partition of `events` (a manual operation, rare); when it finds none, the
-- store asks the packed history too (PagesOfReference: a packed task was delivered, so started).
SELECT COUNT(*) FROM events
WHERE routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ? AND position > ?
  AND (state NOT IN (0, 2) OR attempts > 0)
LIMIT 1;

-- name: ReferenceHead
-- A manual retry in place: the reference's pending head (it has not started: LaterTaskStarted said
-- so), which goes back to the queue behind the retried task. A consistent read: the retry holds the
-- reference's heads (LockHeads). `state = 0` prunes to `open`.
SELECT id, position FROM events WHERE state = 0 AND routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ?;

-- name: RequeueTask
-- Puts a pending head back in the queue (state 2), behind a task retried in place.
UPDATE events SET state = 2 WHERE state = 0 AND id = ? LIMIT 1;

-- name: RetryTask
-- Gives a failed task a fresh retry budget: pending (0) or queued (2), its last error cleared, at
-- position ?; its attempts are kept, so that the next one is numbered after them, and the budget
-- counts from here (retry_base, migrations/0013_task_retry_base.sql). It leaves its event worker
-- (which may be done by now): the next claim's EventService assigns it again. Guarded by the failed
-- states, with the row locked by LockFailedTask (or LockFailedTasks).
UPDATE events
SET state = ?, position = ?, retry_base = attempts, last_error = NULL, next_attempt_at = NULL, processed_at = NULL,
    processed_by = NULL, claim_id = NULL, lease_expires_at = NULL, worker_id = NULL
WHERE id = ? AND state IN (20, 40) LIMIT 1;

-- name: UncountRetried
-- Retried tasks that had been folded into settled_count (state 40, ? of them) are open again, and
-- counted by the scan of the open partitions: they leave the folded count, in the retry's
-- transaction.
UPDATE settled_count SET n = n - ?;

-- name: LockFailedTasks
-- The bulk retry locks the failed tasks RetryStateOfReference found (retry.sql), before the
-- reference's bucket (as LockFailedTask), and reads each one's state as it is now (20, or 40 if a
-- fold moved it since) and its position; one no longer failed was retried meanwhile, and the retry
-- reads the reference again. Pruned by the ids to their subpartitions of `fresh` and `failed`.
SELECT id, state, position FROM events WHERE state IN (20, 40) AND id IN (/*ids*/) ORDER BY position FOR UPDATE;
