-- events: the failed events get a partition of their own (issue 20, the operators' console).
--
-- 0005 folded failed events (state 40) into `settled` with the processed history (state 30), so a
-- statement that wanted the failed events alone had to scan the whole history. This splits
-- `settled` in two: `settled` keeps the folded processed events (30), `failed` takes the folded
-- failed ones (40). The layout is then
--   open (< 2), queued (< 10), fresh (< 30), settled (< 40), failed (MAXVALUE),
-- each with the 8 HASH(id) subpartitions of 0002 (a REORGANIZE gives the new partitions the
-- table's subpartitioning). `state IN (20, 40)` now prunes to `fresh` and `failed`: the failed set
-- plus what was settled since the last fold, never the processed history (GET /events?state=failed,
-- ListEvents in sql/events.sql; the overview's count of the failed partition, OverviewCounts in
-- sql/count.sql). Nothing else changes: the sweeper's fold (10 -> 30, 20 -> 40) moves each row to
-- its partition, settled_count still counts both (CountSettledEvents says `state >= 30`), and a
-- manual retry of a folded failed task reads `state IN (20, 40)` by id as before.
--
-- Partitioning is physical design, not an index, a key or a constraint: the schema rules hold
-- (CheckRules runs after every migration). Every row stays visible to every read.
--
-- Existing data: REORGANIZE PARTITION copies the `settled` partition (the history) into the two new
-- ones, and writes to the table wait for the copy: on a large table, run it in a maintenance window
-- (docs/deploy.md). It copies nothing else (not `open`, `queued` or `fresh`). The ALTER is atomic; a
-- rerun after it was applied gets 1517 "duplicate partition name", which the runner treats as
-- applied (schema.go), so re-running it is harmless.
ALTER TABLE events REORGANIZE PARTITION settled INTO (
  PARTITION settled VALUES LESS THAN (40),
  PARTITION failed  VALUES LESS THAN MAXVALUE
);
