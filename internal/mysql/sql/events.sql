-- events: every event, pending or processed. No index exists: `state = 0` prunes a statement to the
-- `open` partition (see migrations/0001_init.sql), and everything else is a scan.

-- name: InsertProcessed
-- POST /events: the event is born processed. No lock is needed beyond the row it inserts; the id
-- came from the status counter, so it is unique.
INSERT INTO events (id, value, state, created_at, processed_at, processed_by, process_count)
VALUES (?, ?, 10, NOW(6), NOW(6), 'api', 1);

-- name: InsertPending
-- POST /events/async: the event is born pending, in the `open` partition. The queue message is sent
-- only after this commits (autocommit), so a message never names an event that does not exist.
INSERT INTO events (id, value, state, created_at) VALUES (?, NULL, 0, NOW(6));

-- name: Get
-- A consistent (non-locking) read of one event, from both partitions.
SELECT id, value, state, created_at, processed_at, processed_by, process_count
FROM events WHERE id = ? LIMIT 1;

-- name: Count
-- A consistent (non-locking) count of every event, from both partitions.
SELECT COUNT(*) FROM events;

-- name: ClaimIDs
-- The processor's claim: locks those of the named events that are still pending and that nobody
-- else holds. SKIP LOCKED means a worker never waits for another: an event locked elsewhere is
-- simply not returned, and the caller reports its message as failed so that it comes back later.
-- `state = 0` keeps the scan inside the `open` partition. The list is expanded to one ? per id.
SELECT id FROM events WHERE state = 0 AND id IN (/*ids*/) FOR UPDATE SKIP LOCKED;

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
-- our ids). The CASE is expanded to one WHEN ? THEN ? per id, the IN list to one ? per id.
UPDATE events
SET value = CASE id /*cases*/ END,
    state = 10,
    processed_at = NOW(6),
    processed_by = ?,
    process_count = process_count + 1
WHERE state = 0 AND id IN (/*ids*/);

-- name: States
-- After a claim, tells the ids that were not claimed apart: processed already, pending but held by
-- another worker, or unknown. A consistent read: it takes no lock and waits for none.
SELECT id, state FROM events WHERE id IN (/*ids*/);
