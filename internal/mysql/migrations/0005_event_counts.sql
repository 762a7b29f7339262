-- event_counts: the number of events, kept in the transactions that create them, so that GET /events
-- reads 32 rows instead of scanning every event (COUNT(*) has no index to read and InnoDB keeps no
-- exact row count: a count of ten million events took seconds).
--
-- The count is spread over 32 slots, rows created here in advance: a create adds its events to the
-- slot of its first id (id MOD 32, countSlots in store.go, sql/event_counts.sql), in the
-- transaction that inserts them, and the count is the sum of the slots. Writers therefore seldom
-- meet on one row lock. Why 32: the UPDATE has no index either and scans the slots up to its own
-- (at READ COMMITTED it skips a slot another writer holds without waiting for it), so each slot
-- costs every create a little; with 32, concurrent creates of different processes land on the
-- same slot about once in 32, and a process's own creates are written one group at a time.
-- Changing the number of slots takes a migration that adds the rows before the code uses them.
CREATE TABLE IF NOT EXISTS event_counts (
  slot INT    NOT NULL,
  n    BIGINT NOT NULL
) ENGINE=InnoDB;

-- The slots 0..31 that do not exist yet, at 0: a rerun after a failure adds none twice (migrations
-- run under a named lock, schema.go, so two processes cannot both insert them).
INSERT INTO event_counts (slot, n)
SELECT lo.d + 8 * hi.d, 0
FROM (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
      UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7) AS lo
CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3) AS hi
WHERE NOT EXISTS (SELECT 1 FROM event_counts c WHERE c.slot = lo.d + 8 * hi.d);

-- Existing events: the count absorbs every event the slots do not account for. The events and the
-- slots are read in one consistent snapshot (REPEATABLE READ, taken at START TRANSACTION), in which
-- every create of the new code is either whole (its events and its slot's increment) or absent, so
-- the difference is exactly the events stored without a count: those of the code before this
-- migration. It is added to slot 0 as a difference, so creates that commit meanwhile keep their
-- own increments, nothing waits for the scan (it takes no lock), and a rerun adds 0 when nothing
-- is missing: the statements are safe to run again, and to run while the new code writes.
--
-- What it cannot see: events stored by the code before this migration after its snapshot. The old
-- code inserts without counting, so until no process of the old version writes, each of its
-- creates is missing from the count. Upgrade with the old writers stopped (the API's creates), or
-- run these six statements again, by hand, once the last old process is gone (docs/guarantees.md).
-- The scan reads every event once (seconds for ten million), in a snapshot that holds back purge
-- meanwhile.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;
START TRANSACTION WITH CONSISTENT SNAPSHOT;
SELECT COUNT(*) INTO @exactlyonce_events FROM events;
SELECT COALESCE(SUM(n), 0) INTO @exactlyonce_counted FROM event_counts;
UPDATE event_counts SET n = n + (@exactlyonce_events - @exactlyonce_counted) WHERE slot = 0;
COMMIT;
