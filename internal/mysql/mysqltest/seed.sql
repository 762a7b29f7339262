-- The seeding of the benchmark's scratch databases (seed*.go): rows written as the stores write
-- them, in bulk. The statements that copy a store's are checked against it by that store's tests,
-- so that a seed never writes rows the store would not.

-- name: LoadPages
-- pagestore's InsertPage (pagestore/pages.sql): rows of the packed history, /*columns*/ every
-- column, /*rows*/ one (?, ?, ...) per row.
INSERT INTO event_pages (page, events, /*columns*/) VALUES /*rows*/;

-- name: LoadArchive
-- pagestore's AdvanceArchive (pagestore/archive.sql), for a history written straight to the archive
-- as page objects (LoadArchivedHistory): the move's start past its pages, and its counts; and
-- marked_next past them when it reaches their first page (an object written for each page from
-- there), so that the next move does not pass them again (migrations/0037).
UPDATE history_archive SET archived_pages = archived_pages + ?, archived_events = archived_events + ?,
  next_page = GREATEST(next_page, ?), high_page = GREATEST(high_page, ?),
  marked_next = IF(marked_next >= ?, GREATEST(marked_next, ?), marked_next);

-- name: LoadCounterFacts
-- counterstore's InsertCounterFacts (counterstore/counters.sql): /*rows*/ is one
-- (?, ?, ?, ?, ?, ?, NOW(6)) per fact.
INSERT INTO t_counter (bucket, kind, entity_hash, entity_type, user_id, entity_id, at) VALUES /*rows*/;

-- name: LoadCounterSums
-- counterstore's InsertCounterSums (counterstore/counters.sql): /*rows*/ is one
-- (?, ?, ?, ?, ?, NOW(6)) per count.
INSERT INTO t_counter_sum (bucket, entity_type, user_id, sum, version, updated_at) VALUES /*rows*/;

-- name: LoadCounterDirectory
-- A counter bucket's directory, written whole: the entries of the entities the seed counted.
UPDATE counter_directories SET directory = ? WHERE bucket = ?;

-- name: ForgetDirectory
-- The reference directory emptied (/*sets*/ is `dN = ''` for every column), as migration 0016
-- leaves a database that held tasks before it: every cell, a test's small database.
UPDATE reference_directory SET /*sets*/;

-- name: ForgetDirectoryLog
-- And what creates logged for it and the sweeper has not compacted yet (migration 0018).
DELETE FROM reference_directory_log;

-- name: BackfillNotBegun
-- And its backfill not begun, free to begin (taskstore/backfill.go).
UPDATE reference_backfill SET next_id = 0, until_id = NULL, begin_after = NULL;

-- name: FillDirectoryCell
-- taskstore's AppendDirectory (taskstore/directory.sql) for one cell: entries of other
-- references appended to a reference's cell (/*column*/ its column), as a long history of tasks
-- fills it.
UPDATE reference_directory SET /*column*/ = CONCAT(/*column*/, ?) WHERE slot = ?;

-- name: LoadAttempts
-- taskstore's InsertAttempts (taskstore/tasks.sql): a task's delivery attempts, as settlements
-- leave them (a task retried by hand again and again keeps every one); /*rows*/ is one
-- (?, ?, NOW(6) + INTERVAL ? MICROSECOND, 1000, 503, ?, 'seed') per attempt, numbered in order.
INSERT INTO task_attempts (event_id, number, started_at, duration_us, status, error, claim_id) VALUES /*rows*/;
