-- The bulk retry's statements (retry_reference.go): a reference's failed tasks retried in a
-- statement per batch rather than one per task (1,000 failed tasks took 0.47 s, one
-- statement each, under the reference's bucket lock, which every create in the bucket waits for),
-- its heads and failed tasks read in one round trip, and, for a reference with no open task whose
-- failed tasks go back in their places, the bucket taken only to check and commit.

-- name: RetryTasks
-- RetryTask (tasks.sql) for up to 200 tasks at once: each its state and position (/*states*/ and
-- /*positions*/ are `WHEN ? THEN ?` per task: its id, its value), a fresh retry budget, its
-- attempts kept. Guarded by the failed states, with the rows locked by LockFailedTasks; pruned by
-- the ids to their subpartitions of `fresh` and `failed` (the UPDATE's semi-consistent read passes
-- the rows others hold there), and it moves them to `open` and `queued`, which has no key to wait
-- on: it waits for no one, so a retry in place runs it before it takes the bucket
-- (RetryInPlaceCheck). The caller checks that it changed every one (LIMIT ? is their number).
UPDATE events
SET state = CASE id /*states*/ END, position = CASE id /*positions*/ END, retry_base = attempts, last_error = NULL,
    next_attempt_at = NULL, processed_at = NULL, processed_by = NULL, claim_id = NULL, lease_expires_at = NULL, worker_id = NULL
WHERE state IN (20, 40) AND id IN (/*ids*/) LIMIT ?;

-- name: RetryStateOfReference
-- POST /references/{referenceId}/retry, first with no lock (the failed tasks it finds are locked
-- next, LockFailedTasks), then, unless the retry goes in place first (RetryInPlaceCheck), with the
-- reference's bucket locked, in one round trip: its
-- open tasks (`0, id, state, position`: its heads, pending or processing, which the retry locks
-- with tasks.sql's LockHeads and then reads again, as a head settled meanwhile is not open any
-- more) and its failed tasks (`1, id, state, position`), by a consistent read. The read after the
-- heads are locked is the one the retry goes by: with the bucket and the heads held, no task of
-- the reference fails or is retried meanwhile (a fold may still move one from 20 to 40:
-- LockFailedTasks reads the state again). `state < 2` prunes the first part to `open`, `state IN
-- (20, 40)` the second to `fresh` and `failed`: the pending set, the failed set and what was
-- settled since the last fold, never the processed history.
-- The retry goes in parts (retry_reference.go): the failed tasks are the first LIMIT ? by position
-- (50,001 when the call reads the set, once a call: what it can answer and one more, to know
-- whether more remain; a part's and one more under the bucket; the whole set, with a LIMIT no
-- reference reaches, when it goes whole). The last column says whether an open task is a bulk retry's held
-- head (pending, not due before its hold ends, not attempted since its retry, no error: no other
-- open task is all of these; a task waiting its backoff has an attempt since its retry and its
-- error). Held, it is a retry's first part, whose later parts continue what the first decided.
-- Rows `2, id, state, position, 1` are a queued task held the same way: the frontier of a retry to
-- the end behind an open task (the last task its parts have retried; HoldRetried), which no
-- promotion passes while held. A scan of `queued` (`state = 2`), as a settlement's
-- QueuedOfReferences; never the history.
SELECT 0, id, state, position,
       COALESCE(state = 0 AND next_attempt_at > NOW(6) AND retry_base = attempts AND last_error IS NULL, 0) FROM events
WHERE state < 2 AND routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ?
UNION ALL
(SELECT 1, id, state, position, 0 FROM events
WHERE state IN (20, 40) AND routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ?
ORDER BY position LIMIT ?)
UNION ALL
SELECT 2, id, state, position, 1 FROM events
WHERE state = 2 AND routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ?
  AND next_attempt_at > NOW(6) AND retry_base = attempts AND last_error IS NULL
ORDER BY 1, 4;

-- name: OpenOfReference
-- A later part of a bulk retry in parts, with the bucket held and the head it found held locked
-- (LockHeads): the reference's open tasks, as RetryStateOfReference's first part, which must be
-- that head alone, still held. The part does not read the failed set again under the bucket: with
-- the head held, no task of the reference is open but it, so none fails meanwhile (the failed
-- tasks it retries are locked, and a fold or a task's retry of a later one changes nothing it
-- decides). A consistent read of `open` only.
SELECT id, state, position,
       COALESCE(state = 0 AND next_attempt_at > NOW(6) AND retry_base = attempts AND last_error IS NULL, 0) FROM events
WHERE state < 2 AND routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ?;

-- name: CountFailedOfReference
-- A bulk retry's first part that sends the reference's failed tasks to the end, in parts: how many
-- failed tasks it has, so that the part takes a position from the bucket for each (a create
-- between two parts takes its positions after all of them). The failed set (`fresh` and
-- `failed`), as RetryStateOfReference's second part; under the bucket and the heads, so the count
-- does not change but by a fold (20 to 40, still counted).
SELECT COUNT(*) FROM events
WHERE state IN (20, 40) AND routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ?;

-- name: HoldRetried
-- A bulk retry in parts holds the head it made (the first failed task, pending) until its last
-- part: not due before NOW + ? microseconds, so that no claim starts it (claims take a pending
-- task only once due) and the reference delivers nothing while later parts put its other failed
-- tasks back; the reference has an open task, so a create between two parts queues behind it, as
-- it would behind the whole retry. Each part sets it again; a retry that stops (its process
-- killed, its caller gone) lets the hold end by itself, and the reference goes on. `state = 0`
-- prunes to `open`; the row is locked by the part (LockFailedTasks or LockHeads).
-- A retry to the end behind a task open now cannot hold that task (it is processing, or waits a
-- backoff): it holds its frontier instead, the last task its first part retried, queued (`state =
-- 2`), which a settlement promotes pending with its hold kept and never leases (tasks.sql's
-- QueuedOfReferences, PromoteQueued), so nothing behind it (the failed tasks not retried yet, whose
-- places follow it, then a create between parts) is promoted before the last part releases it.
-- `state IN (0, 2)` prunes to `open` and `queued`; the row is locked by the part (LockFailedTasks
-- or LockFrontier).
UPDATE events SET next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND WHERE state IN (0, 2) AND id = ? LIMIT 1;

-- name: ReleaseRetried
-- The last part of a bulk retry in parts releases its held head: due at once (as any task a retry
-- makes pending, next_attempt_at NULL), and the API sends its queue message after the commit; a
-- frontier still queued (HoldRetried) is promoted in its turn as any queued task.
UPDATE events SET next_attempt_at = NULL WHERE state IN (0, 2) AND id = ? LIMIT 1;

-- name: LockFrontier
-- A later part of a retry to the end behind an open task locks the frontier its parts hold
-- (HoldRetried), queued or, once the tasks before it were delivered, pending, after the bucket: so
-- that no settlement promotes it while the part decides (a settlement that promotes it holds it
-- until it commits: the part then reads it pending, still held). An UPDATE that changes nothing,
-- as tasks.sql's LockHeads; `state IN (0, 2)` prunes to `open` and `queued`, `id = ?` to its
-- subpartitions.
UPDATE events SET position = position WHERE state IN (0, 2) AND id = ?;

-- name: FrontierOf
-- The frontier a retry in parts holds, by id (LockFrontier, or a later part of one call, which
-- knows it): its state, position, and whether it is still held (RetryStateOfReference's last
-- column). No row: it was delivered, or retried, since.
SELECT id, state, position,
       COALESCE(next_attempt_at > NOW(6) AND retry_base = attempts AND last_error IS NULL, 0) FROM events
WHERE state IN (0, 2) AND id = ?;

-- name: RetryInPlaceCheck
-- A bulk retry in place of a reference that had no open task (retry_reference.go,
-- retryInPlaceFirst) decides and writes before it takes the reference's bucket, and runs this once
-- it holds it, before it commits: the reference's open tasks (`0, id, NULL`: there must be one, the
-- head it has just made pending, visible to its own consistent read), what was logged for its
-- directory cell (`1, NULL, entries`) and the cell (`2, NULL, cell`), which must hold the same
-- entries of the reference as when it decided. A task of the reference created, or retried to the
-- end, in between shows in both; with the bucket held, no other can come until the commit (a
-- compaction meanwhile moves entries from the log to the cell: the same entries). A consistent
-- read, no lock: `state < 2` prunes the first part to `open`, `slot = ?` the others to the slot's
-- partitions (/*column*/ is its dN, written by the store from a hash, never caller text).
SELECT 0, id, NULL FROM events
WHERE state < 2 AND routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ?
UNION ALL
SELECT 1, NULL, entries FROM reference_directory_log WHERE slot = ? AND col = ?
UNION ALL
SELECT 2, NULL, /*column*/ FROM reference_directory WHERE slot = ?;

-- name: LaterUnfailedTaskStarted
-- A bulk retry's first part while the reference directory is not complete (the backfill,
-- backfill.go): tasks.sql's LaterTaskStarted with the failed tasks (20, 40) left out by their state,
-- as TasksStarted's third column does once the directory is complete: the bulk retry retries every
-- failed task of the reference, in parts, and names none (they may be more than a part holds).
-- Scans every partition of `events`, as LaterTaskStarted (a manual operation, rare, and only until
-- the backfill is done; only the first part asks: a later one continues its held head); when it
-- finds none, the store asks the packed history too.
SELECT COUNT(*) FROM events
WHERE routing_hash = ? AND kind = 'task' AND CAST(reference_id AS BINARY) = ? AND position > ?
  AND (state NOT IN (0, 2) OR attempts > 0) AND state NOT IN (20, 40)
LIMIT 1;
