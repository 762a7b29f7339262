-- reference_directory and reference_backfill (migrations/0016_reference_directory.sql) and
-- reference_directory_log (0018): each reference's tasks, 24 bytes an entry (directory.go), in a
-- cell (one column d0 .. d99 of one row, slot) chosen by the reference, or, until the sweeper
-- compacts them into it, in the log's rows of that cell. `slot = ?` / `slot IN (...)` prunes a
-- statement to the partitions of the slots named (in the directory, one row each). A slot's row
-- and its log rows are written only by a transaction that holds the slot's task bucket (slot mod
-- 64, tasks.sql's LockTaskBuckets or AdvanceTaskBuckets), so their locks are never waited for. /*column*/, /*columns*/ and /*sets*/ are column names the store writes
-- from hashes (d0 .. d99), never caller text.

-- name: ReadDirectoryEntries
-- A reference's listing, a manual retry and the backfill: what was logged for the reference's cell
-- and not compacted yet (`0, entries`: reference_directory_log, 0018), then the cell itself (`1,
-- cell`), which hold the reference's entries (and those of the references that share the cell). A
-- consistent read, no lock: the listing reads what was committed (the log part runs first, so an
-- entry the compaction moves meanwhile is read twice, never missed; readers count a task once); a
-- retry and the backfill hold the slot's task bucket, so no one can log, compact or append
-- meanwhile. `slot = ?` prunes each part to the slot's partition: the log's rows of 8 slots since
-- their last compactions (32 partitions, migrations/0036), and the slot's one row, of which one column is copied (/*column*/, dN,
-- written by the store from a hash, never caller text).
SELECT 0, entries FROM reference_directory_log WHERE slot = ? AND col = ?
UNION ALL
SELECT 1, /*column*/ FROM reference_directory WHERE slot = ?;

-- name: LogDirectory
-- A create (InsertTasks): its tasks' entries, a row for each cell it adds to (/*rows*/ is `(?, ?,
-- ?, ?)` per row), in the transaction that stores the tasks, under their references' task buckets.
-- An insert reads no row and waits for no one (the table has no key).
INSERT INTO reference_directory_log (slot, col, first_id, entries) VALUES /*rows*/;

-- name: LoggedSlots
-- The sweeper's compaction (CompactDirectory): the slots that have log rows. A consistent read, no
-- lock, of the slot column only: it scans what was logged since the last compaction.
SELECT DISTINCT slot FROM reference_directory_log;

-- name: SlotLog
-- The compaction of slots (compactSlots: a bucket's four, or the slots of every bucket a create or a
-- retry holds), with their task buckets held: up to ? of their log rows, in one statement. Pruned to
-- the slots' partitions, each scanned in the order its rows were inserted, so that the rows of one
-- cell (one slot) come in the order they were logged, and a LIMIT leaves a later part of a slot's
-- rows, never an earlier one, for the next read. A consistent read: only the buckets' holder writes
-- the slots' rows, and that is the caller.
SELECT slot, col, first_id, entries FROM reference_directory_log WHERE slot IN (/*slots*/) LIMIT ?;

-- name: DeleteSlotLog
-- The compaction: the rows of the slots it has just appended to their cells (/*slots*/, and
-- /*ids*/: their first_id, which no two log rows share, being the id of a task whose entry only
-- its create logs), in the same transaction, with the slots' task buckets held. Pruned to the
-- slots' partitions; the caller checks that it deleted each one, and no other.
DELETE FROM reference_directory_log WHERE slot IN (/*slots*/) AND first_id IN (/*ids*/);

-- name: AppendDirectory
-- The compaction, a retry to the end and the backfill: appends entries to cells, in the
-- transaction that moves them from the log (or moves, or backfills) their tasks; a retry and the
-- backfill compact the slots first, so that a task's newer entry is never before an older one. /*sets*/ is `dN = CASE slot WHEN ?
-- THEN CONCAT(dN, ?) ... ELSE dN END` per column written. Locks the rows of the slots named (an
-- UPDATE's semi-consistent read passes the others of the partition: there are none), which only
-- the holder of their task buckets writes: the caller holds them, so this waits for no one.
UPDATE reference_directory SET /*sets*/ WHERE slot IN (/*ids*/);

-- name: DirectoryComplete
-- Whether every task has its entries: the backfill (0016) is done when next_id has reached
-- until_id. Until then the reads use the scans they used before (tasks.sql, pages.sql). One row; a
-- consistent read. Cached by the store once true (it never becomes false again).
SELECT COUNT(*) FROM reference_backfill WHERE until_id IS NOT NULL AND next_id >= until_id;

-- name: TakeBackfill
-- The backfill, first statement of each of its transactions: the progress row, locked until the
-- transaction ends, so that two sweepers never backfill one range at once. SKIP LOCKED: a sweeper
-- that finds it taken backfills at its next maintenance. Taken before any bucket: no transaction
-- that holds a bucket waits for this row, so the order cannot deadlock. The last column says
-- whether it may begin (begin_after, migrations/0016_reference_directory.sql says why it waits).
SELECT next_id, until_id, begin_after IS NULL OR begin_after <= NOW(6) FROM reference_backfill FOR UPDATE SKIP LOCKED;

-- name: SetBackfill
-- The backfill: records its progress (and, the first time, where it ends: the id counter then), in
-- the transaction that appended the entries of the range, under TakeBackfill's lock.
UPDATE reference_backfill SET next_id = ?, until_id = ?;

-- name: BackfillTasks
-- The backfill: the tasks with a reference among ids [?, ?) still in `events`, the packed ones
-- are read from their pages (pagestore.History.ReadColumns: page rows, then an archived page's
-- object). A consistent read, no lock, before the bucket locks; the entries are appended under
-- them, and only for ids the cell does not hold yet. It
-- scans `events`, which the pack keeps to the pending set, what is not packed yet and the failed
-- events (no partition is pruned by a range of ids), once per range of a unit of ids: a one-time
-- cost for a database migrated with tasks in it.
SELECT id, reference_id, position FROM events
WHERE kind = 'task' AND reference_id IS NOT NULL AND id >= ? AND id < ?;

-- name: TasksStarted
-- A manual retry's question "has a later task of this reference started?", for the later tasks the
-- directory names (/*ids*/, at most 500 a statement): how many of them `events` holds, and how
-- many of those have started (settled, processing, or attempted: a manual retry keeps a task's
-- attempts). One that `events` does not hold was packed (or archived): processed, so started. A
-- consistent read, under the reference's bucket and heads, pruned by the ids to their
-- subpartitions: the reference's tasks, not the history. The third column leaves the failed ones
-- out (20, 40): a reference's bulk retry (retry_reference.go) retries every failed task of the
-- reference, in parts, and asks the question of the tasks it does not retry, without naming the
-- failed ones (they may be more than a part holds).
SELECT COUNT(*), COALESCE(SUM(state NOT IN (0, 2) OR attempts > 0), 0),
       COALESCE(SUM(state NOT IN (20, 40) AND (state NOT IN (0, 2) OR attempts > 0)), 0)
FROM events WHERE id IN (/*ids*/);
