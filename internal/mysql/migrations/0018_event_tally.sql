-- event_tally: the number of events ever created, kept by the creates themselves, so that GET
-- /events reads a few rows whatever has not been folded yet.
--
-- The count was settled_count (the folded events, 0005) plus a scan of the events not folded yet
-- (`open`, `queued`, `fresh`): after a burst of 100,000 creates that no fold had reached, 52-68 ms
-- instead of 3. Now every transaction that inserts events adds how many to one row of this table
-- before it commits (eventstore/count.sql, TallyCreated): the insert and the addition commit
-- together or not at all, so one consistent read of the table's rows is the exact number of events
-- committed. 64 rows (shards), one per partition of HASH(shard): a create names its shard, chosen by
-- the id of its first event, so that concurrent creates rarely meet on a row, and the statement is
-- pruned to that row. The row's lock is taken last in the create's transaction and held only to its
-- commit; nothing else writes these rows.
--
-- event_tally_base: the events the tally does not hold, one row. `n` is NULL until the sweeper has
-- derived it (eventstore.DeriveTallyBase): the count then is settled_count plus the scan, as
-- before. The API of the version before this migration creates events without adding them to the
-- tally until the deploy has replaced it, so the base is derived no earlier than `begin_after`, 15
-- minutes after this migration, once: (the count by the scan) - (the tally), in one consistent
-- view. A database on which no id was ever handed out has nothing to wait for: base 0 at once, so
-- that every new database migrates to the same rows.
--
-- Partitioning is physical design, not an index or a key: the schema rules hold (CheckRules).
-- Every statement is idempotent: tables IF NOT EXISTS, rows inserted only into empty tables (one
-- statement each, so all or none).
CREATE TABLE IF NOT EXISTS event_tally (
  shard INT    NOT NULL,
  n     BIGINT NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (shard) PARTITIONS 64;

INSERT INTO event_tally (shard, n)
SELECT a.n * 8 + b.n, 0
FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL
      SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7) a,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL
      SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7) b
WHERE NOT EXISTS (SELECT 1 FROM event_tally);

CREATE TABLE IF NOT EXISTS event_tally_base (
  n           BIGINT      NULL,
  begin_after DATETIME(6) NULL
) ENGINE=InnoDB;

INSERT INTO event_tally_base (n, begin_after)
SELECT IF(h.history, NULL, 0), IF(h.history, NOW(6) + INTERVAL 15 MINUTE, NULL)
FROM (SELECT EXISTS (SELECT 1 FROM status WHERE id > 0) OR EXISTS (SELECT 1 FROM events)
             OR EXISTS (SELECT 1 FROM event_pages) AS history) h
WHERE NOT EXISTS (SELECT 1 FROM event_tally_base);
