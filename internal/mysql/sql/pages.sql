-- The packed history (migrations/0012_event_pages.sql, internal/pages): settled events packed out
-- of `events` a page of a thousand ids at a time. Page p holds ids p*1000 .. p*1000+999, in the
-- columns c0 .. c9 of a hundred ids each; a page has one row, or more when events of its ids
-- settled after it was packed. `page = ?` prunes a statement to one of 1,024 HASH(page) partitions.
-- Nothing here takes a lock but the pack's own writes.

-- name: GetPacked
-- GET /events/{id} of an event that `events` no longer holds: the one column of its page that holds
-- its id (/*column*/ is c0 .. c9, chosen by the store from the id, never caller text; a CASE would
-- make every column part of the read, and InnoDB copies every BLOB a statement reads of every row it
-- scans). Every row of the page, usually one. A consistent read, after the read of `events`: the
-- pack inserts a page and deletes its events in one transaction, so an event is in one or the
-- other for every read that comes after it.
SELECT /*column*/ FROM event_pages WHERE page = ?;

-- name: PageRows
-- GET /events?state=processed walks the packed history down from its cursor a page at a time:
-- every column of every row of one page.
SELECT c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 FROM event_pages WHERE page = ?;

-- name: PagesOfReference
-- A reference's packed tasks (GET /references/{id}/events, and a manual retry's question "has a
-- later task of the reference started?"): the page rows whose bytes hold the reference, which the
-- reader decodes and checks (the bytes may also be in a payload). It scans every page row, the
-- packed history: as the reference's listing scanned the history before there were pages
-- (docs/guarantees.md, "Tasks"). A consistent read.
SELECT c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 FROM event_pages
WHERE INSTR(CONCAT(c0, c1, c2, c3, c4, c5, c6, c7, c8, c9), ?) > 0;

-- name: PackablePages
-- The pack, first read: the pages of the events in `open`, `queued`, `fresh` and `settled` (`state
-- <= 30` prunes away `failed`), with whether any of them is not folded yet. A page whose events are
-- all folded (state 30) can be packed; one that still has a pending, processing, queued or
-- just-settled event waits for it (its folded events wait in `settled`). Its cost is the pending
-- set plus what was settled and not packed yet, not the history. A consistent read.
SELECT id DIV 1000, MAX(state < 30) FROM events WHERE state <= 30 GROUP BY id DIV 1000;

-- name: PackedRows
-- The pack, in its transaction: the folded events of the pages it packs (/*pages*/ is one ? per
-- page), every column but the lease. A consistent read; nothing changes a folded event but a pack,
-- and DeletePacked checks that it deletes exactly these.
SELECT id, routing_hash, kind, state, value, created_at, processed_at, processed_by, process_count, attempts,
       last_error, next_attempt_at, url, payload, reference_id, max_retries, position, claim_id, worker_id
FROM events WHERE state = 30 AND id DIV 1000 IN (/*pages*/);

-- name: PackedAttempts
-- The pack: the delivery attempts of the tasks it packs (/*ids*/, at most 500 a statement), pruned by
-- HASH(event_id) to their partitions. A processed task is never attempted again.
SELECT event_id, number, started_at, duration_us, status, error, claim_id FROM task_attempts WHERE event_id IN (/*ids*/);

-- name: InsertPages
-- The pack: the page rows, /*rows*/ one (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) per row.
INSERT INTO event_pages (page, events, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9) VALUES /*rows*/;

-- name: DeletePacked
-- The pack: deletes the events it packed from `events`, in the transaction that inserted their
-- pages. The caller checks that it deleted exactly as many as PackedRows read, and rolls back
-- otherwise: more means an event settled into these pages since (it would be lost), fewer that a
-- concurrent pack took some (they would be packed twice). At READ COMMITTED the scan reads rows
-- that other transactions hold semi-consistently and passes those of other pages without waiting.
DELETE FROM events WHERE state = 30 AND id DIV 1000 IN (/*pages*/);

-- name: DeletePackedAttempts
-- The pack: deletes the attempts it packed (/*ids*/, at most 500 a statement).
DELETE FROM task_attempts WHERE event_id IN (/*ids*/);

-- name: PackedCount
-- The events in the packed history, for migrate's re-creation of a lost settled_count row
-- (CountSettledEvents counts the rest). It scans every page row's `events` column only.
SELECT COALESCE(SUM(events), 0) FROM event_pages;

-- name: AuditPages
-- For checkers only (tests, the chaos run, the bench), as Audit: every page row.
SELECT c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 FROM event_pages;
