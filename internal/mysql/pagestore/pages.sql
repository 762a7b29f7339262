-- The packed history (migrations/0012_event_pages.sql, internal/pages): settled events packed out
-- of `events` into page rows of ten thousand ids. Page p holds ids p*10000 .. p*10000+9999, in the
-- columns c0 .. c99 of a hundred ids each; the sweeper packs a unit of a thousand ids (ten columns)
-- at a time. A page usually has one row, more when events of a unit settled after it was packed.
-- `page = ?` prunes a statement to one of 1,024 HASH(page) partitions, which holds one page row up
-- to 10,240,000 events. /*column*/ and /*columns*/ are column names the store writes from ids
-- (c0 .. c99), never caller text. Nothing here takes a lock but the pack: its turn, PackedEvents,
-- LockUnit and its writes.

-- name: GetPacked
-- GET /events/{id} of an event that `events` no longer holds: the one column of its page that holds
-- its id (a CASE would make every column part of the read, and InnoDB copies every BLOB a statement
-- reads of every row it scans). Every row of the page, usually one. A consistent read, after the
-- read of `events`: the pack inserts a unit and deletes its events in one transaction, so an event
-- is in one or the other for every read that comes after it.
SELECT /*column*/ FROM event_pages WHERE page = ?;

-- name: UnitRows
-- GET /events?state=processed walks the packed history down from its cursor a span of columns at a
-- time (those of the cursor's column down to what the page's limit needs, then a unit's ten): the
-- span's columns of every row of its page. The bench's seeding reads a unit's columns with it.
SELECT /*columns*/ FROM event_pages WHERE page = ?;

-- name: PagesOfReference
-- A reference's packed tasks (GET /references/{id}/events, and a manual retry's question "has a
-- later task of the reference started?", until the reference directory is complete: taskstore's
-- directory.sql; after it they read the reference's tasks by id): of the page rows that hold the reference's bytes (its
-- length, the reference and its routing hash: pages.ReferenceNeedle), the columns that hold them,
-- the others NULL; the reader decodes and checks those (the bytes could also be in a payload).
-- /*found*/ is `IF(INSTR(cN, q.r) > 0, cN, NULL)` for every column, /*any*/ `INSTR(cN, q.r) > 0`
-- for every column joined by OR: one INSTR per column, not one of their CONCAT (NULL past
-- max_allowed_packet), and the needle sent once (q), so that the statement stays short. It scans
-- every page row, the packed history, as the reference's listing scanned the history before there
-- were pages (docs/guarantees.md); it sends back only the columns with the reference's tasks. A
-- consistent read.
SELECT /*found*/ FROM event_pages JOIN (SELECT ? AS r) q WHERE /*any*/;

-- name: PackableUnits
-- The pack, first read: the units of the events in `open`, `queued`, `fresh` and `settled` (`state
-- <= 30` prunes away `failed`), with whether any of them is not folded yet. A unit whose events are
-- all folded (state 30) can be packed; one that still has a pending, processing, queued or
-- just-settled event waits for it (its folded events wait in `settled`). Its cost is the pending
-- set plus what was settled and not packed yet, not the history. A consistent read.
SELECT id DIV 1000, MAX(state < 30) FROM events WHERE state <= 30 GROUP BY id DIV 1000;

-- name: TakePackTurn
-- The pack, first statement of each of its transactions: the one row of pack_turn (migration 0014),
-- locked until the transaction ends, so that packs run one at a time. Two packs at once
-- would each hold their units' events (PackedEvents) and then wait in DeletePacked for the
-- other's: a DELETE's scan, unlike an UPDATE's, waits for every row another transaction holds,
-- matching or not, even at READ COMMITTED. SKIP LOCKED: a pack that finds the turn taken packs
-- nothing now (its sweeper's next maintenance packs), rather than hold a sweeper's batches up.
-- No row at all is an error for the caller (PackTurnRows tells the two apart).
SELECT turn FROM pack_turn FOR UPDATE SKIP LOCKED;

-- name: PackTurnRows
-- The pack, when TakePackTurn returned no row: whether pack_turn has its row. A consistent read.
SELECT COUNT(*) FROM pack_turn;

-- name: PackedEvents
-- The pack, under its turn: the folded events of the units it packs (/*units*/ is one ? per
-- unit), their kind, and the bytes of their strings and payload (NULL counts 0; RecordOverhead is
-- added in Go), so that the pack plans its reads and writes by bytes before it reads any payload.
-- A locking read, and what makes the pack exact whatever runs beside it: it holds every
-- event it returns until it commits, so that no other pack can delete and pack one of them
-- meanwhile (the turn keeps other packs out, and this holds even without it), and nothing else
-- changes a folded event; DeletePacked then deletes every one of them, and its count tells whether
-- it deleted any other (a late event folded into these units since). SKIP LOCKED: it waits for no
-- one; a row it skips is a fold's not committed yet (or another pack's, without the turn), which
-- this pack neither writes nor counts, and which DeletePacked's count sees if it is still there.
SELECT id, kind, LENGTH(kind) + COALESCE(LENGTH(value), 0) + COALESCE(LENGTH(processed_by), 0)
       + COALESCE(LENGTH(last_error), 0) + COALESCE(LENGTH(url), 0) + COALESCE(LENGTH(payload), 0)
       + COALESCE(LENGTH(reference_id), 0) + COALESCE(LENGTH(claim_id), 0) + COALESCE(LENGTH(worker_id), 0)
FROM events WHERE state = 30 AND id DIV 1000 IN (/*units*/) FOR UPDATE SKIP LOCKED;

-- name: PackedAttemptSizes
-- The pack: how many delivery attempts each task it holds has, and the bytes of their strings
-- (/*ids*/, at most 500 a statement), pruned by HASH(event_id) to their partitions. A consistent
-- read: a processed task is never attempted again.
SELECT event_id, COUNT(*), SUM(LENGTH(claim_id) + COALESCE(LENGTH(error), 0)) FROM task_attempts
WHERE event_id IN (/*ids*/) GROUP BY event_id;

-- name: PackedRows
-- The pack: every column but the lease of the events of one read (at most 16 MiB of them, planned
-- by PackedEvents' sizes: pages.go, planReads), those with ids from its first to its last (?, ?)
-- of its units (/*units*/), just before it writes them. A consistent read: the pack holds these
-- events' locks since PackedEvents, so they are as it locked them; it keeps only those, and passes
-- over any other event of the range (one folded since). ORDER BY id: the server sorts the ids of
-- the rows it scans and then reads the rows it returns, so that the scan does not copy the payload
-- of every row of `settled` for each read (InnoDB copies the BLOBs a statement reads of every row
-- it scans), and a unit's rows come one after the other.
SELECT id, routing_hash, kind, state, value, created_at, processed_at, processed_by, process_count, attempts,
       last_error, next_attempt_at, url, payload, reference_id, max_retries, position, claim_id, worker_id
FROM events WHERE state = 30 AND id BETWEEN ? AND ? AND id DIV 1000 IN (/*units*/) ORDER BY id;

-- name: PackedAttempts
-- The pack: the delivery attempts of the tasks of one read (/*ids*/, at most 500 a statement),
-- pruned by HASH(event_id) to their partitions. A processed task is never attempted again.
SELECT event_id, number, started_at, duration_us, status, error, claim_id FROM task_attempts WHERE event_id IN (/*ids*/);

-- name: LockUnit
-- The pack: locks the rows of a unit's page and reads the unit's ten columns of each (/*columns*/),
-- a scan of one partition of 1,024 (about one row). The row lock keeps the rows as read until the
-- pack commits (packs take turns, TakePackTurn; the lock holds against any other writer besides).
SELECT /*columns*/ FROM event_pages WHERE page = ? FOR UPDATE;

-- name: MergeUnit
-- The pack: writes a unit's ten columns into the page's row LockUnit read (/*sets*/ is `cN = ?` for
-- each), which it names by the page and by what those columns held (/*was*/ is `LENGTH(cN) = ? AND
-- SHA2(cN, 256) = ?` for each: the length first, so that rows of other lengths are passed without
-- a digest, and the digest rather than the bytes, so that the statement carries the unit once):
-- empty (the first time), or the unit's events packed before, which the new columns hold with the
-- late ones merged in. So a late event of a unit (a create that took its id long before it
-- inserted) does not add a row to the page: a page keeps one row, and a read scans one. Two rows of
-- a page whose unit columns are equal are equal for every reader, so either may be the one written.
UPDATE event_pages SET events = events + ?, /*sets*/ WHERE page = ? AND /*was*/ LIMIT 1;

-- name: InsertPage
-- The pack: a new row of a page, /*columns*/ every column, /*rows*/ one (?, ?, ...) per row.
INSERT INTO event_pages (page, events, /*columns*/) VALUES /*rows*/;

-- name: DeletePacked
-- The pack: deletes the events it packed from `events`, in the transaction that wrote their units.
-- It deletes at least the events PackedEvents locked (they are this transaction's until it ends);
-- the caller checks that it deleted exactly as many, and rolls back otherwise: more means an event
-- was folded into these units since, and deleting it would lose it. A DELETE's scan waits for
-- every row of `settled` that another transaction holds (no semi-consistent read, unlike an
-- UPDATE's), whatever its unit: a fold committing (briefly), or another pack (which the turn keeps
-- out).
DELETE FROM events WHERE state = 30 AND id DIV 1000 IN (/*units*/);

-- name: DeletePackedAttempts
-- The pack: deletes the attempts it packed (/*ids*/, at most 500 a statement).
DELETE FROM task_attempts WHERE event_id IN (/*ids*/);
