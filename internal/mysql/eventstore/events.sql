-- events: every event, pending, processing or processed. No index exists: `state < 2` prunes a statement to the
-- `open` partition (migrations/0001_init.sql; `state = 2` to `queued`, the tasks waiting for an
-- earlier task of their reference, 0009_tasks.sql), `state >= 10 AND state < 30` to `fresh` (settled
-- and not yet counted, migrations/0005_settled_count.sql), `state = 30` to `settled` (the processed
-- history) and `state = 40` to `failed` (the failed events once counted,
-- migrations/0011_failed_partition.sql), `id = ?` and `id IN (...)` prune it to the
-- subpartitions those ids hash to (migrations/0002_subpartition_by_id.sql), and within what is
-- left every statement is a scan. The sweeper packs the folded processed events (`settled`) out of
-- this table into pages (sql/pages.sql, migrations/0012_event_pages.sql), so `settled` holds only
-- what is not packed yet, and a read by id that does not find its event here reads its page.

-- name: InsertProcessed
-- POST /events: the event is born processed. No lock is needed beyond the row it inserts; the id
-- came from the status counter, so it is unique. routing_hash is the murmur3 hash of its routing
-- key, computed in Go (internal/routing).
INSERT INTO events (id, routing_hash, value, state, created_at, processed_at, processed_by, process_count)
VALUES (?, ?, ?, 10, NOW(6), NOW(6), 'api', 1);

-- name: InsertPendingRows
-- POST /events/async: the events are born pending, in the `open` partition. One statement for one
-- request, or for the concurrent requests of one process, so they are committed together or not at
-- all. The queue message is sent only after this commits (autocommit), so a message never names an
-- event that does not exist. /*rows*/ is one (?, ?, NULL, 0, NOW(6)) per event: its id and its
-- routing hash (internal/routing), by which agents split the pending events between them.
INSERT INTO events (id, routing_hash, value, state, created_at) VALUES /*rows*/;

-- name: Get
-- A consistent (non-locking) read of one event: one subpartition of each state partition. Not
-- found: it is packed (GetPacked, sql/pages.sql, read after this), or there is none.
SELECT id, kind, value, state, created_at, processed_at, processed_by, process_count,
       attempts, last_error, next_attempt_at, url, payload, reference_id, max_retries, routing_hash, position
FROM events WHERE id = ? LIMIT 1;

-- name: ListEvents
-- GET /events?state=: one page of the events of a set of states, newest first, with the columns Get
-- reads. /*states*/ is a list of integer literals from a fixed table of the store's (listStates in
-- events_list.go), never caller text: literals, so that the statement is pruned when it is
-- prepared, to the partitions of that set alone, and its cost is bounded by them:
--   pending (0), processing (1)   `open`: the pending set;
--   queued (2)                    `queued`: the tasks waiting behind their reference's head;
--   processed (10, 30)            `fresh` and `settled`: the events settled since the sweeper's
--                                 last fold, and the folded ones not packed yet; the store then
--                                 reads the packed pages down from the cursor (pages_read.go);
--   failed (20, 40)               `fresh` and `failed`: the failed set, and what was settled since
--                                 the last fold.
-- Every row of those partitions is read (no index), the matches below the cursor `id < ?` are sorted
-- by id and the first ? kept. `? = '' OR kind = ?` narrows to one kind (plain or task), or none. A
-- consistent read: no lock taken or waited for.
SELECT id, kind, value, state, created_at, processed_at, processed_by, process_count,
       attempts, last_error, next_attempt_at, url, payload, reference_id, max_retries, routing_hash, position
FROM events
WHERE state IN (/*states*/) AND id < ? AND (? = '' OR kind = ?)
ORDER BY id DESC LIMIT ?;

-- name: ClaimIDs
-- The processor's claim: locks those of the named events that are claimable (pending, or processing
-- with an expired lease) and that nobody else holds. SKIP LOCKED means a claim never waits for
-- another: an event locked elsewhere is simply not returned, and the caller reports its message as
-- failed so that it comes back later. An event leased to another claim whose lease has not expired
-- does not match (at READ COMMITTED its row lock is released at once), so it is not claimed either.
-- `state < 2` keeps the scan inside the `open` partition (queued tasks, state 2, have a partition of
-- their own and are never claimed: migrations/0009_tasks.sql); LIMIT (the number of ids) ends the scan
-- as soon as every named event is found. The list is expanded to one ? per id.
--
-- A locking scan locks each row it reads and, at READ COMMITTED, releases the rows that do not
-- match at once. So another claim's scan can hold one of our rows for an instant, and SKIP LOCKED
-- then skips it although nobody is processing it. claimIDs asks again for such rows (ClaimableIDs).
SELECT id, kind, attempts, url, payload, reference_id, max_retries, routing_hash, position, worker_id, retry_base FROM events
WHERE state < 2 AND id IN (/*ids*/)
  AND ((state = 0 AND (next_attempt_at IS NULL OR next_attempt_at <= NOW(6))) OR lease_expires_at <= NOW(6))
LIMIT ? FOR UPDATE SKIP LOCKED;

-- name: ClaimableIDs
-- Which of the named events are claimable, by a consistent (non-locking) read of the `open`
-- partition: it takes no lock and waits for none. Used after a claim to tell an event that another
-- claim really holds (still claimable) from one that is settled, leased, waiting its backoff, or
-- unknown.
SELECT id FROM events
WHERE state < 2 AND id IN (/*ids*/)
  AND ((state = 0 AND (next_attempt_at IS NULL OR next_attempt_at <= NOW(6))) OR lease_expires_at <= NOW(6));

-- name: ClaimDue
-- The sweeper's claim: locks up to ? claimable events, skipping any another claim holds: pending
-- events older than the grace period (younger ones are left to the queue path), or whose backoff is
-- over (their work was tried: the grace no longer applies; a released event, or a task handed on by
-- the settlement of the one before it, is due at once), and processing events whose lease expired (their process died or
-- gave up). An event waiting its backoff does not match, so a failing event never holds up the rows
-- behind it. Several sweepers and processors can run this at once; each gets a disjoint set of rows.
-- `state < 2` prunes it to the `open` partition.
--
-- `routing_hash BETWEEN ? AND ?` narrows it to the agent's hash range (the whole space for a lone
-- agent or a sweeper outside any agent), so that agents do not scan past and skip each other's
-- rows. It is not what makes the claim exclusive: two agents with a stale view of the ranges both
-- claiming one range still get disjoint rows from SKIP LOCKED, and the settle's guard holds.
--
-- It reads only what every claimed event needs; a task's own columns are read after it
-- (ClaimedTasks), for the tasks alone. The server copies each column a statement reads into its row
-- buffer, a NULL across its whole declared width (url and reference_id: 3 KB), for every row the
-- claim locks, and the drain claims hundreds of plain events a statement, whose task columns are
-- all NULL.
--
-- `(? = 0 OR kind <> 'task')` leaves tasks out when the engine would take none (it delivers none,
-- or its deadline leaves no time for a delivery): it neither locks them nor lets them fill the
-- LIMIT ahead of the events it can take.
--
-- `PARTITION (/*open*/)` names the subpartitions of `open` it scans, in the order of their numbers
-- (opensp0 to opensp7, written by the store: claim.go's openSubpartitions, never caller text). A
-- scan of a subpartition starts at its front, and the rows the last claims there settled stay
-- there, delete-marked, until InnoDB's purge removes them: the scan walks over each one (its
-- header decoded column by column, its lock checked). A claim that always started at opensp0 found
-- about 20 such records an event in a drain. So a claimer whose last claim was full starts at the
-- next subpartition (claimFrom), names it and those after it here, and names those before it in a
-- second statement only if the first came back short, so that fewer than ? rows in all still means
-- that no more were due; by the time it comes back to a subpartition, purge has cleared what it
-- left there. A claimer whose last claim was short (an idle sweeper) names all eight, in one
-- statement. The locks are the same in every case: the rows returned, nothing else kept.
SELECT id, kind, attempts FROM events PARTITION (/*open*/)
WHERE state < 2
  AND routing_hash BETWEEN ? AND ?
  AND ((state = 0 AND ((next_attempt_at IS NULL AND created_at <= NOW(6) - INTERVAL ? MICROSECOND)
                        OR next_attempt_at <= NOW(6)))
    OR (state = 1 AND lease_expires_at <= NOW(6)))
  AND (? = 0 OR kind <> 'task')
LIMIT ? FOR UPDATE SKIP LOCKED;

-- name: ClaimedTasks
-- The task columns of tasks ClaimDue has just locked, in the claim's transaction: a consistent read,
-- no lock taken or waited for. Our own row locks keep the rows as ClaimDue found them (nothing else
-- can change them until we commit), and at READ COMMITTED the read sees their latest committed
-- version, which is that one. A locking read here would wait for the rows of other claims that
-- the scan passes. `state < 2` keeps it inside the `open` partition, and LIMIT (the number of ids)
-- ends the scan at the last of the named rows: about where ClaimDue's scan ended. The list is
-- expanded to one ? per id.
SELECT id, url, payload, reference_id, max_retries, routing_hash, position, worker_id, retry_base FROM events
WHERE state < 2 AND id IN (/*ids*/)
LIMIT ?;

-- name: Lease
-- Leases claimed events to one claim, in the transaction that holds their row locks: they become
-- `processing`, held by claim_id until lease_expires_at (the database's clock, so that the processes'
-- clocks do not matter). The transaction then commits, releasing the row locks: the work runs
-- outside any transaction, and the lease, not a lock, keeps other claims off. `state < 2` with our
-- row locks held is the guard. The IN list is expanded to one ? per id. /*worker*/ names the event
-- worker of each task an EventService drafted one for in this claim (`CASE WHEN id IN (...) THEN ?
-- ... ELSE worker_id END`, a worker per branch), or is `worker_id`: the assignment's worker_id is
-- written by the lease itself, not by an AssignTasks after it (agentstore's WriteDraft writes the
-- workers' rows next: the task rows first, then the workers', the order of every transaction that
-- writes both).
UPDATE events
SET state = 1, claim_id = ?, lease_expires_at = NOW(6) + INTERVAL ? MICROSECOND, worker_id = /*worker*/
WHERE state < 2 AND id IN (/*ids*/)
LIMIT ?;

-- name: MarkProcessed
-- The one-transaction path (inline work): gives claimed events their values and moves them to the
-- `settled` partition, in the transaction that holds their locks. `state < 2` is the guard that
-- makes a second write impossible even if a lock were lost: a processed row no longer matches. At
-- READ COMMITTED the scan does a semi-consistent read of rows other claims hold and does not wait
-- for them (they do not match our ids). `id IN` prunes it to the subpartitions that hold the ids,
-- and LIMIT (the number of ids) ends the scan at the last of our rows instead of at the end of the
-- subpartition: claims take rows from the front, so this scans about what the claim scanned. The CASE is expanded to one WHEN ? THEN ? per id, the IN list to one ? per
-- id; the caller keeps a statement under 16 KB (RDS Proxy pins the session of a larger one).
UPDATE events
SET value = CASE id /*cases*/ END,
    state = 10,
    processed_at = NOW(6),
    processed_by = ?,
    process_count = process_count + 1,
    claim_id = ?,
    lease_expires_at = NULL
WHERE state < 2 AND id IN (/*ids*/)
LIMIT ?;

-- name: LockLeased
-- The lease path's settlement, first statement: locks which of the named events are still leased to
-- this claim (LeasedIDs reads which next). An event whose lease expired and was claimed again by another
-- claim has another claim_id (or is settled already) and does not match, so only the current
-- holder can settle, and only once. The row locks taken here make the UPDATE that follows change
-- exactly these rows, and no claim can take them over in between. `state = 1` prunes it to the
-- `open` partition, `id IN` to the subpartitions of the ids, and LIMIT (the number of ids) ends the
-- scan at the last of them.
-- A task settlement (SettleTasks) locks its heads here before it reads their references' queues: a
-- create queueing a task behind one of them holds it (LockHeads in tasks.sql) until it commits, and
-- this waits for it: the head's last committed version matches.
-- An UPDATE that changes nothing (the lock is the point, as tasks.sql's LockHeads), not a SELECT
-- ... FOR UPDATE: the scan passes the rows of the other claims leased in the same subpartitions,
-- and a locking SELECT waits for every one another transaction holds, and then keeps that row's
-- lock until it commits, matching or not (InnoDB keeps the lock of a row it had to wait for). So
-- it held a row of another claim while it waited for the next one that claim's transactions held
-- (its event worker's assignment, its lease, its settlement), which then asked for the row it kept:
-- the tasks benchmark's ordered rounds lost 13 to 26 such deadlocks per 20,000 tasks
-- (taskstore's TestASettlementWaitsForNoRowOfAnotherClaim catches the wait that began them: the
-- locking read waits for another claim's row, and times out there). At READ COMMITTED an
-- UPDATE's scan reads a row another transaction holds semi-consistently (its last committed
-- version) and passes it by if it is not one of ours: it waits only for its own rows.
UPDATE events SET claim_id = claim_id WHERE state = 1 AND claim_id = ? AND id IN (/*ids*/) LIMIT ?;

-- name: LeasedIDs
-- Which of the named events LockLeased has just locked: a consistent read, no lock. The rows it
-- locked match and cannot change until this transaction ends; a row it did not lock could match
-- now only if a transaction of this claim had leased it since, and a claim's settlement names only
-- events leased to it before it began. The same pruning and LIMIT as LockLeased.
SELECT id FROM events WHERE state = 1 AND claim_id = ? AND id IN (/*ids*/) LIMIT ?;

-- name: SettleLeased
-- The lease path's settlement: gives the events LockLeased locked their values, in the same short
-- transaction. Guarded by the state *and* the lease holder again, so that a lost lock could not make
-- it settle twice. An expired lease that nobody took over still settles: the work is done, and the
-- row lock orders the settlement against a claim racing for it (a claim that comes first changes
-- claim_id; one that comes second finds the event settled).
UPDATE events
SET value = CASE id /*cases*/ END,
    state = 10,
    processed_at = NOW(6),
    processed_by = ?,
    process_count = process_count + 1,
    lease_expires_at = NULL
WHERE state = 1 AND claim_id = ? AND id IN (/*ids*/)
LIMIT ?;

-- name: Release
-- Gives leased events back, pending, when their work failed or could not finish before their process's
-- deadline: they are claimable at once instead of after their lease, by any claim (next_attempt_at
-- now: the sweeper's grace does not hold them back). Guarded by the lease holder,
-- like the settlement: an event whose lease was taken over is not touched.
UPDATE events
SET state = 0, claim_id = NULL, lease_expires_at = NULL, next_attempt_at = NOW(6)
WHERE state = 1 AND claim_id = ? AND id IN (/*ids*/);

-- name: FailClaimed
-- The one-transaction path: records a failed attempt of an event claimed in this transaction (its
-- row lock held, so `state < 2` is the guard). state is 0 (pending, waiting next_attempt_at) or 20
-- (failed for good: out of attempts). Assignments are evaluated left to right, so `attempts` is
-- incremented last. claim_id names the claim that recorded the failure; for a failed event it is the
-- claim that gave up, and processed_at the time it did.
UPDATE events
SET state = ?, last_error = ?, next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND,
    processed_at = IF(? = 20, NOW(6), NULL), processed_by = IF(? = 20, ?, NULL),
    claim_id = ?, lease_expires_at = NULL, attempts = attempts + 1
WHERE state < 2 AND id = ?
LIMIT 1;

-- name: FailLeased
-- The lease path: records a failed attempt of an event leased to this claim, as FailClaimed does,
-- guarded by the lease holder like the settlement (an event whose lease was taken over is not
-- touched). A short transaction of its own after the work; the row lock this UPDATE takes orders it
-- against a claim racing for an expired lease.
UPDATE events
SET state = ?, last_error = ?, next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND,
    processed_at = IF(? = 20, NOW(6), NULL), processed_by = IF(? = 20, ?, NULL),
    claim_id = ?, lease_expires_at = NULL, attempts = attempts + 1
WHERE state = 1 AND claim_id = ? AND id = ?
LIMIT 1;

-- name: OpenStates
-- After a claim, which of the ids it did not take are still open: held by another claim (its row
-- lock or its lease), waiting a backoff, or (a task) queued behind an earlier task of its
-- reference. kind, and whether the event waits (queued, or a backoff not over), tell a task the
-- database will bring back by itself from one a claim holds. A consistent read of the `open` partition only (`state <
-- 10`), so its cost is bounded by the pending set, not by the settled history: the ids it does not
-- find are settled or unknown, which the status counter tells apart (Outcomes). It takes no lock
-- and waits for none.
SELECT id, kind, state = 2 OR next_attempt_at > NOW(6) FROM events WHERE state < 10 AND id IN (/*ids*/);
