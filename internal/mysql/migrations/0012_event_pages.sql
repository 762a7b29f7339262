-- event_pages: the packed history (issue 19, reads that stay fast as history grows).
--
-- With no index, a read of one event by id scans what its statement is pruned to: in `events`, one
-- hash subpartition of the `settled` partition, an eighth of the history (509 ms at 10,000,000
-- events). The sweeper therefore packs the processed history out of `events` into this table
-- (sql/pages.sql, PackPages; internal/pages for the format): page p holds the settled events with
-- ids p*1000 .. p*1000+999, in ten BLOB columns of a hundred ids each (c0 holds ids ending 000-099,
-- c9 900-999), with the delivery attempts of its tasks (taken out of task_attempts). A read of a
-- packed event names its page and the one column holding its id (GetPacked): HASH(page) prunes it
-- to one partition of 1,024, about ten page rows at 10,000,000 events, and InnoDB copies the BLOB
-- columns a statement reads of every row it scans, so reading one column of ten copies a tenth.
--
-- Why these numbers (measured, docs/performance.md): every statement on a partitioned table pays
-- about 0.2 us per partition the table has, so 1,024 partitions cost a read about 0.2 ms and 8,192
-- about 2 ms; a thousand events a row keeps the rows per partition near ten up to about 20,000,000
-- events (about 2.6 us per extra row a read scans after that).
--
-- A page usually has one row. It has more when events of its ids settle after it was packed (a
-- failed task retried by hand and then delivered, a create that took its id long before it
-- inserted), or when its events are too large for one row (the packer keeps a row under 4 MB, well
-- below max_allowed_packet): readers read every row of the page. `events` counts the events of the
-- row, so that migrate can re-create settled_count (CountSettledEvents).
--
-- Existing data: nothing is copied and nothing waits. The table is created empty; the sweeper packs
-- the history already in `events` a batch of pages at a time, in transactions of its own, while
-- everything else runs (docs/deploy.md says how long that takes). Re-running this is harmless.
CREATE TABLE IF NOT EXISTS event_pages (
  page   BIGINT     NOT NULL,
  events INT        NOT NULL,
  c0     MEDIUMBLOB NOT NULL,
  c1     MEDIUMBLOB NOT NULL,
  c2     MEDIUMBLOB NOT NULL,
  c3     MEDIUMBLOB NOT NULL,
  c4     MEDIUMBLOB NOT NULL,
  c5     MEDIUMBLOB NOT NULL,
  c6     MEDIUMBLOB NOT NULL,
  c7     MEDIUMBLOB NOT NULL,
  c8     MEDIUMBLOB NOT NULL,
  c9     MEDIUMBLOB NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (page) PARTITIONS 1024;
