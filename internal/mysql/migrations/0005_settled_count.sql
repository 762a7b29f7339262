-- The count of events, exact and at a cost that does not grow with history (GET /events).
--
-- COUNT(*) over every partition scans the whole history. Instead the settled events are split in two
-- partitions: `fresh` (states 10 and 20, as every settlement and every synchronous create writes
-- them) and `settled` (states 30 and 40: the same processed and failed, once counted). The sweeper
-- folds fresh rows into `settled` in bounded batches (FoldSettled, sql/count.sql): one transaction
-- moves up to a batch of rows (state + 20) and adds the number it moved to the one row of
-- settled_count. The count is then
--     settled_count.n + COUNT(*) of `open` and `fresh`
-- read by one statement, so in one consistent snapshot: a fold's move and its addition are seen
-- together or not at all, and every committed create is counted exactly once. Its cost is bounded by
-- the pending events and by what was settled since the last fold, not by the history. The write
-- paths are unchanged: nothing they do touches settled_count.
--
-- The states a caller sees do not change: the store reads 30 as processed and 40 as failed.
--
-- settled_count starts at 0 because no row has a counted state when this runs; the rows already
-- settled stay in `fresh` (counted by the scan) until the sweeper has folded them. Migrate checks
-- that settled_count holds exactly one row, like the id counter's (schema.go).
--
-- Existing data: ALTER TABLE ... PARTITION BY copies the table (ALGORITHM=COPY), and writes wait for
-- the copy; run it on a large table in a maintenance window (docs/deploy.md). Re-running it is
-- harmless: it rebuilds the same layout.
CREATE TABLE IF NOT EXISTS settled_count (
  n BIGINT NOT NULL
) ENGINE=InnoDB;

ALTER TABLE events
PARTITION BY RANGE (state)
SUBPARTITION BY HASH (id) SUBPARTITIONS 8 (
  PARTITION open    VALUES LESS THAN (10),
  PARTITION fresh   VALUES LESS THAN (30),
  PARTITION settled VALUES LESS THAN MAXVALUE
);

INSERT INTO settled_count (n) SELECT 0 FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM settled_count);
