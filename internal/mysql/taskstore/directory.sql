-- reference_directory and reference_backfill (migrations/0016_reference_directory.sql): each
-- reference's tasks, 24 bytes an entry (directory.go), in a cell (one column d0 .. d99 of one row,
-- slot) chosen by the reference. `slot = ?` / `slot IN (...)` prunes a statement to the partitions
-- of the slots named, one row each. A slot's row is written only by a transaction that holds the
-- slot's task bucket (slot mod 64, tasks.sql's LockTaskBuckets or AdvanceTaskBuckets), so its row
-- lock is never waited for. /*column*/, /*columns*/ and /*sets*/ are column names the store writes
-- from hashes (d0 .. d99), never caller text.

-- name: ReadDirectoryCell
-- A reference's listing, a manual retry and the backfill: the one cell holding the reference's
-- entries (and those of the references that share it). A consistent read, no lock: the listing
-- reads what was committed; a retry and the backfill hold the slot's task bucket, so no one can
-- append to the cell meanwhile. Scans the slot's partition (one row) and copies one column.
SELECT /*column*/ FROM reference_directory WHERE slot = ?;

-- name: AppendDirectory
-- A create (InsertTasks), a retry to the end and the backfill: appends entries to cells, in the
-- transaction that stores (or moves, or backfills) their tasks. /*sets*/ is `dN = CASE slot WHEN ?
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
-- subpartitions: the reference's tasks, not the history.
SELECT COUNT(*), COALESCE(SUM(state NOT IN (0, 2) OR attempts > 0), 0) FROM events WHERE id IN (/*ids*/);
