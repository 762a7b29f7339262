-- The history by tier (GET /history, the console's overview): the rows of `events`, the events
-- packed into event_pages, and the estimate of its rows, without reading the packed history.
-- Run after LockSettledCountAt (count.sql) in one READ COMMITTED transaction: no fold commits until
-- it ends, so settled_count's n is fixed, and n = (the folded rows of `events`) + (the events in
-- event_pages) + (the events archived) at every moment, since a pack moves folded rows into a page
-- in one transaction (and the archive's move a page to S3 in one). So the packed events are n less
-- the folded rows this reads less what the archive holds (TierArchive), exact, without a scan of
-- event_pages.

-- name: TierArchive
-- The archive's tier: the page objects in the bucket and the events they hold (history_archive's
-- one row, which the move updates in the transaction that deletes a page's rows). Read after
-- LockSettledCountAt and before TierRows, in the same transaction: the packed events are n less
-- TierRows' folded rows less these archived events. A consistent read of one row, no lock (the
-- move never waits for this read).
SELECT archived_pages, archived_events FROM history_archive;

-- name: TierRows
-- Every row of `events`, and of them those folded (`settled` and `failed`, state 30 and 40), by one
-- consistent read. It scans every partition: the open events, what was settled since the last fold,
-- what the pack has not packed yet (the pack reads the same, PackableUnits) and the failed events
-- (the overview reads them too, OverviewCounts); never the packed history. No lock.
SELECT COUNT(*), COALESCE(SUM(state >= 30), 0) FROM events;

-- name: PageRowsEstimate
-- The rows of event_pages, estimated: InnoDB's row count of each of its 1,024 partitions, which
-- every insert and delete updates, read from the data dictionary without touching a row (about
-- 20 ms; the first read after the table is opened, a few hundred). No lock; read after the
-- transaction of TierRows has committed, so that no fold waits for it.
-- COUNT(*) is the partitions seen: none means the user cannot see the table, an error for the
-- caller rather than a zero. The count is InnoDB's, not exact: when the table is opened again it
-- starts from the persistent statistics, which may be behind.
SELECT COUNT(*), COALESCE(SUM(TABLE_ROWS), 0) FROM information_schema.PARTITIONS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'event_pages';
