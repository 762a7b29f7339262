-- events: every event, pending or processed. No index exists: `state = 0` prunes a statement to the
-- `open` partition (migrations/0001_init.sql), `id = ?` and `id IN (...)` prune it to the
-- subpartitions those ids hash to (migrations/0002_subpartition_by_id.sql), and within what is
-- left every statement is a scan.

-- name: InsertProcessed
-- POST /events: the event is born processed. No lock is needed beyond the row it inserts; the id
-- came from the status counter, so it is unique.
INSERT INTO events (id, value, state, created_at, processed_at, processed_by, process_count)
VALUES (?, ?, 10, NOW(6), NOW(6), 'api', 1);

-- name: InsertPendingRows
-- POST /events/async: the events are born pending, in the `open` partition. One statement for one
-- request, or for the concurrent requests of one process, so they are committed together or not at
-- all. The queue message is sent only after this commits (autocommit), so a message never names an
-- event that does not exist. /*rows*/ is one (?, NULL, 0, NOW(6)) per event.
INSERT INTO events (id, value, state, created_at) VALUES /*rows*/;

-- name: Get
-- A consistent (non-locking) read of one event: one subpartition of each state partition.
SELECT id, value, state, created_at, processed_at, processed_by, process_count
FROM events WHERE id = ? LIMIT 1;

-- name: Count
-- A consistent (non-locking) count of every event: every partition, the one read that scans them all.
SELECT COUNT(*) FROM events;

-- name: ClaimIDs
-- The processor's claim: locks those of the named events that are still pending and that nobody
-- else holds. SKIP LOCKED means a worker never waits for another: an event locked elsewhere is
-- simply not returned, and the caller reports its message as failed so that it comes back later.
-- `state = 0` keeps the scan inside the `open` partition; LIMIT (the number of ids) ends the scan
-- as soon as every named event is found. The list is expanded to one ? per id.
--
-- A locking scan locks each row it reads and, at READ COMMITTED, releases the rows that do not
-- match at once. So another worker's scan can hold one of our rows for an instant, and SKIP LOCKED
-- then skips it although nobody is processing it. ProcessIDs asks again for such rows (PendingIDs).
SELECT id FROM events WHERE state = 0 AND id IN (/*ids*/) LIMIT ? FOR UPDATE SKIP LOCKED;

-- name: PendingIDs
-- Which of the named events are pending, by a consistent (non-locking) read of the `open`
-- partition: it takes no lock and waits for none. Used after a claim to tell an event that another
-- worker really holds (still pending) from one processed already (not here).
SELECT id FROM events WHERE state = 0 AND id IN (/*ids*/);

-- name: ClaimDue
-- The sweeper's claim: locks up to ? pending events older than the grace period (younger ones are
-- left to the queue path), skipping any another worker holds. Several sweepers and processors can
-- run this at once; each gets a disjoint set of rows.
SELECT id FROM events
WHERE state = 0 AND created_at <= NOW(6) - INTERVAL ? MICROSECOND
LIMIT ? FOR UPDATE SKIP LOCKED;

-- name: MarkProcessed
-- Gives claimed events their values and moves them to the `settled` partition, in the transaction
-- that holds their locks. `state = 0` is the guard that makes a second write impossible even if a
-- lock were lost: a processed row no longer matches. At READ COMMITTED the scan does a
-- semi-consistent read of rows other workers hold and does not wait for them (they do not match
-- our ids). LIMIT (the number of ids) ends the scan at the last of our rows instead of at the end of
-- the partition: claims take rows from the front, so this scans about what the claim scanned. The
-- CASE is expanded to one WHEN ? THEN ? per id, the IN list to one ? per id; the caller keeps a
-- statement under 16 KB (RDS Proxy pins the session of a larger one).
UPDATE events
SET value = CASE id /*cases*/ END,
    state = 10,
    processed_at = NOW(6),
    processed_by = ?,
    process_count = process_count + 1
WHERE state = 0 AND id IN (/*ids*/)
LIMIT ?;

-- name: States
-- After a claim, tells the ids that were not claimed apart: processed already, pending but held by
-- another worker, or unknown. A consistent read: it takes no lock and waits for none.
SELECT id, state FROM events WHERE id IN (/*ids*/);
