-- event_pages: the packed history (issue 19, reads that stay fast as history grows).
--
-- With no index, a read of one event by id scans what its statement is pruned to: in `events`, one
-- hash subpartition of the `settled` partition, an eighth of the history (509 ms at 10,000,000
-- events). The sweeper therefore packs the processed history out of `events` into this table
-- (sql/pages.sql; internal/pages for the format): page p holds the settled events with ids
-- p*10000 .. p*10000+9999, in a hundred BLOB columns of a hundred ids each (c0 holds ids ending
-- 0000-0099, c99 9900-9999), with the delivery attempts of its tasks (taken out of task_attempts).
-- A read of a packed event names its page and the one column holding its id (GetPacked): HASH(page)
-- prunes it to one partition of 1,024, which holds one page row up to 10,240,000 events (pages are
-- consecutive numbers), and InnoDB copies the BLOB columns a statement reads of every row it scans,
-- so it copies one column of one row.
--
-- Why these numbers (measured, docs/performance.md): every statement on a partitioned table pays
-- about 0.2 us per partition the table has, so 1,024 partitions cost a read about 0.2 ms and 8,192
-- about 2 ms; and a read copies the column it reads of every row in its partition before the server
-- checks `page = ?`, so rows per partition are what a read pays for: pages of 1,000 ids (ten rows a
-- partition at 10,000,000 events) read 0.67x as fast as with 10,000 events, pages of 10,000 ids 0.9x.
--
-- The sweeper packs a unit of 1,000 ids (ten columns) at a time, once all of it is settled: the
-- first unit of a page inserts the page's row (the other columns empty), the next ones write their
-- columns of it, under the row's lock. Events of a unit that settle after it was packed (a failed
-- task retried by hand and then delivered, a create that took its id long before it inserted) are
-- merged into the unit's columns. A page has more than one row only when two packs insert the
-- same new page at once, or when a unit is too large for one statement (the pack keeps one under
-- 4 MB, well below max_allowed_packet): readers read every row of the page. `events` counts the
-- events of the row, so that migrate can re-create settled_count (CountSettledEvents).
--
-- Existing data: nothing is copied and nothing waits. The table is created empty; the sweeper packs
-- the history already in `events` a batch of units at a time, in transactions of its own, while
-- everything else runs (docs/deploy.md says how long that takes). Re-running this is harmless.
CREATE TABLE IF NOT EXISTS event_pages (
  page   BIGINT     NOT NULL,
  events INT        NOT NULL,
  c0   MEDIUMBLOB NOT NULL,
  c1   MEDIUMBLOB NOT NULL,
  c2   MEDIUMBLOB NOT NULL,
  c3   MEDIUMBLOB NOT NULL,
  c4   MEDIUMBLOB NOT NULL,
  c5   MEDIUMBLOB NOT NULL,
  c6   MEDIUMBLOB NOT NULL,
  c7   MEDIUMBLOB NOT NULL,
  c8   MEDIUMBLOB NOT NULL,
  c9   MEDIUMBLOB NOT NULL,
  c10  MEDIUMBLOB NOT NULL,
  c11  MEDIUMBLOB NOT NULL,
  c12  MEDIUMBLOB NOT NULL,
  c13  MEDIUMBLOB NOT NULL,
  c14  MEDIUMBLOB NOT NULL,
  c15  MEDIUMBLOB NOT NULL,
  c16  MEDIUMBLOB NOT NULL,
  c17  MEDIUMBLOB NOT NULL,
  c18  MEDIUMBLOB NOT NULL,
  c19  MEDIUMBLOB NOT NULL,
  c20  MEDIUMBLOB NOT NULL,
  c21  MEDIUMBLOB NOT NULL,
  c22  MEDIUMBLOB NOT NULL,
  c23  MEDIUMBLOB NOT NULL,
  c24  MEDIUMBLOB NOT NULL,
  c25  MEDIUMBLOB NOT NULL,
  c26  MEDIUMBLOB NOT NULL,
  c27  MEDIUMBLOB NOT NULL,
  c28  MEDIUMBLOB NOT NULL,
  c29  MEDIUMBLOB NOT NULL,
  c30  MEDIUMBLOB NOT NULL,
  c31  MEDIUMBLOB NOT NULL,
  c32  MEDIUMBLOB NOT NULL,
  c33  MEDIUMBLOB NOT NULL,
  c34  MEDIUMBLOB NOT NULL,
  c35  MEDIUMBLOB NOT NULL,
  c36  MEDIUMBLOB NOT NULL,
  c37  MEDIUMBLOB NOT NULL,
  c38  MEDIUMBLOB NOT NULL,
  c39  MEDIUMBLOB NOT NULL,
  c40  MEDIUMBLOB NOT NULL,
  c41  MEDIUMBLOB NOT NULL,
  c42  MEDIUMBLOB NOT NULL,
  c43  MEDIUMBLOB NOT NULL,
  c44  MEDIUMBLOB NOT NULL,
  c45  MEDIUMBLOB NOT NULL,
  c46  MEDIUMBLOB NOT NULL,
  c47  MEDIUMBLOB NOT NULL,
  c48  MEDIUMBLOB NOT NULL,
  c49  MEDIUMBLOB NOT NULL,
  c50  MEDIUMBLOB NOT NULL,
  c51  MEDIUMBLOB NOT NULL,
  c52  MEDIUMBLOB NOT NULL,
  c53  MEDIUMBLOB NOT NULL,
  c54  MEDIUMBLOB NOT NULL,
  c55  MEDIUMBLOB NOT NULL,
  c56  MEDIUMBLOB NOT NULL,
  c57  MEDIUMBLOB NOT NULL,
  c58  MEDIUMBLOB NOT NULL,
  c59  MEDIUMBLOB NOT NULL,
  c60  MEDIUMBLOB NOT NULL,
  c61  MEDIUMBLOB NOT NULL,
  c62  MEDIUMBLOB NOT NULL,
  c63  MEDIUMBLOB NOT NULL,
  c64  MEDIUMBLOB NOT NULL,
  c65  MEDIUMBLOB NOT NULL,
  c66  MEDIUMBLOB NOT NULL,
  c67  MEDIUMBLOB NOT NULL,
  c68  MEDIUMBLOB NOT NULL,
  c69  MEDIUMBLOB NOT NULL,
  c70  MEDIUMBLOB NOT NULL,
  c71  MEDIUMBLOB NOT NULL,
  c72  MEDIUMBLOB NOT NULL,
  c73  MEDIUMBLOB NOT NULL,
  c74  MEDIUMBLOB NOT NULL,
  c75  MEDIUMBLOB NOT NULL,
  c76  MEDIUMBLOB NOT NULL,
  c77  MEDIUMBLOB NOT NULL,
  c78  MEDIUMBLOB NOT NULL,
  c79  MEDIUMBLOB NOT NULL,
  c80  MEDIUMBLOB NOT NULL,
  c81  MEDIUMBLOB NOT NULL,
  c82  MEDIUMBLOB NOT NULL,
  c83  MEDIUMBLOB NOT NULL,
  c84  MEDIUMBLOB NOT NULL,
  c85  MEDIUMBLOB NOT NULL,
  c86  MEDIUMBLOB NOT NULL,
  c87  MEDIUMBLOB NOT NULL,
  c88  MEDIUMBLOB NOT NULL,
  c89  MEDIUMBLOB NOT NULL,
  c90  MEDIUMBLOB NOT NULL,
  c91  MEDIUMBLOB NOT NULL,
  c92  MEDIUMBLOB NOT NULL,
  c93  MEDIUMBLOB NOT NULL,
  c94  MEDIUMBLOB NOT NULL,
  c95  MEDIUMBLOB NOT NULL,
  c96  MEDIUMBLOB NOT NULL,
  c97  MEDIUMBLOB NOT NULL,
  c98  MEDIUMBLOB NOT NULL,
  c99  MEDIUMBLOB NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (page) PARTITIONS 1024;
