-- reference_directory: each reference's tasks, kept by the application (issue 31).
--
-- A reference's listing (GET /references/{id}/events) and a manual retry's question "has a later
-- task of this reference started?" used to scan the history for the reference's tasks: `events`
-- with no partition pruned, and every page row of event_pages (9.9 s at 10,000,000 events), the
-- retry under its reference's bucket lock, which every create in the bucket takes first. With no
-- index, they now read a directory instead, as the idempotency keys (0006) and the counter service
-- (0008) read theirs: 24 bytes per task of a reference (8 bytes of the SHA-256 of the reference,
-- the task's id and its position: taskstore/directory.go), appended in the transaction that stores
-- the task (taskstore's InsertTasks), so that a directory never disagrees with the tasks; the reads
-- then read the reference's own tasks by id (events, else its page).
--
-- Where a reference's entries are: a cell, one column (d0 .. d99) of one row (slot). The slot is
-- the reference's task bucket (routing hash mod 64, 0009) plus 64 times 2 bits of the SHA-256 of
-- the reference, so that every writer of a slot holds that slot's task bucket first: a directory
-- row's lock is never waited for, and adds no lock order (creates and retries write their bucket's
-- slots only; the backfill locks the buckets first as they do). The column comes from another byte
-- of the hash. 256 slots, one per partition of HASH(slot): a read names its slot and its column, so
-- it scans one row and copies one cell (InnoDB copies the BLOB columns a statement reads of every
-- row it scans, which is why the cells are columns and not rows: event_pages's shape, 0012). 25,600
-- cells: at 10,000,000 tasks a cell holds about 390 entries (9.4 KB), which a read copies and a
-- create's append rewrites; the reference's own entries are what the reads then fetch.
--
-- reference_backfill: one row, how far the sweeper's backfill has added the entries of the tasks
-- stored before this migration (taskstore/backfill.go): `next_id` is the first id not done yet, `until_id`
-- the id counter when the backfill began (NULL: not begun), `begin_after` when it may begin: 15
-- minutes after this migration, once no API process of the version before it (which stores tasks
-- without entries) can still be creating, as a deploy replaces them within their timeout (NULL: at
-- once). A migration cannot scan the history;
-- the backfill walks it a unit of ids per transaction, resumably, under the same bucket locks. A
-- database with no event at all (a new one) has nothing to backfill: until_id 0, done at once
-- (EXISTS stops at the first row it finds, so this reads at most one row of each table).
--
-- Partitioning is physical design, not an index or a key: the schema rules hold (CheckRules).
-- Every statement is idempotent: tables IF NOT EXISTS, rows inserted only into empty tables (one
-- statement each, so all or none).
CREATE TABLE IF NOT EXISTS reference_directory (
  slot INT NOT NULL,
  d0  MEDIUMBLOB NOT NULL,
  d1   MEDIUMBLOB NOT NULL,
  d2   MEDIUMBLOB NOT NULL,
  d3   MEDIUMBLOB NOT NULL,
  d4   MEDIUMBLOB NOT NULL,
  d5   MEDIUMBLOB NOT NULL,
  d6   MEDIUMBLOB NOT NULL,
  d7   MEDIUMBLOB NOT NULL,
  d8   MEDIUMBLOB NOT NULL,
  d9   MEDIUMBLOB NOT NULL,
  d10  MEDIUMBLOB NOT NULL,
  d11  MEDIUMBLOB NOT NULL,
  d12  MEDIUMBLOB NOT NULL,
  d13  MEDIUMBLOB NOT NULL,
  d14  MEDIUMBLOB NOT NULL,
  d15  MEDIUMBLOB NOT NULL,
  d16  MEDIUMBLOB NOT NULL,
  d17  MEDIUMBLOB NOT NULL,
  d18  MEDIUMBLOB NOT NULL,
  d19  MEDIUMBLOB NOT NULL,
  d20  MEDIUMBLOB NOT NULL,
  d21  MEDIUMBLOB NOT NULL,
  d22  MEDIUMBLOB NOT NULL,
  d23  MEDIUMBLOB NOT NULL,
  d24  MEDIUMBLOB NOT NULL,
  d25  MEDIUMBLOB NOT NULL,
  d26  MEDIUMBLOB NOT NULL,
  d27  MEDIUMBLOB NOT NULL,
  d28  MEDIUMBLOB NOT NULL,
  d29  MEDIUMBLOB NOT NULL,
  d30  MEDIUMBLOB NOT NULL,
  d31  MEDIUMBLOB NOT NULL,
  d32  MEDIUMBLOB NOT NULL,
  d33  MEDIUMBLOB NOT NULL,
  d34  MEDIUMBLOB NOT NULL,
  d35  MEDIUMBLOB NOT NULL,
  d36  MEDIUMBLOB NOT NULL,
  d37  MEDIUMBLOB NOT NULL,
  d38  MEDIUMBLOB NOT NULL,
  d39  MEDIUMBLOB NOT NULL,
  d40  MEDIUMBLOB NOT NULL,
  d41  MEDIUMBLOB NOT NULL,
  d42  MEDIUMBLOB NOT NULL,
  d43  MEDIUMBLOB NOT NULL,
  d44  MEDIUMBLOB NOT NULL,
  d45  MEDIUMBLOB NOT NULL,
  d46  MEDIUMBLOB NOT NULL,
  d47  MEDIUMBLOB NOT NULL,
  d48  MEDIUMBLOB NOT NULL,
  d49  MEDIUMBLOB NOT NULL,
  d50  MEDIUMBLOB NOT NULL,
  d51  MEDIUMBLOB NOT NULL,
  d52  MEDIUMBLOB NOT NULL,
  d53  MEDIUMBLOB NOT NULL,
  d54  MEDIUMBLOB NOT NULL,
  d55  MEDIUMBLOB NOT NULL,
  d56  MEDIUMBLOB NOT NULL,
  d57  MEDIUMBLOB NOT NULL,
  d58  MEDIUMBLOB NOT NULL,
  d59  MEDIUMBLOB NOT NULL,
  d60  MEDIUMBLOB NOT NULL,
  d61  MEDIUMBLOB NOT NULL,
  d62  MEDIUMBLOB NOT NULL,
  d63  MEDIUMBLOB NOT NULL,
  d64  MEDIUMBLOB NOT NULL,
  d65  MEDIUMBLOB NOT NULL,
  d66  MEDIUMBLOB NOT NULL,
  d67  MEDIUMBLOB NOT NULL,
  d68  MEDIUMBLOB NOT NULL,
  d69  MEDIUMBLOB NOT NULL,
  d70  MEDIUMBLOB NOT NULL,
  d71  MEDIUMBLOB NOT NULL,
  d72  MEDIUMBLOB NOT NULL,
  d73  MEDIUMBLOB NOT NULL,
  d74  MEDIUMBLOB NOT NULL,
  d75  MEDIUMBLOB NOT NULL,
  d76  MEDIUMBLOB NOT NULL,
  d77  MEDIUMBLOB NOT NULL,
  d78  MEDIUMBLOB NOT NULL,
  d79  MEDIUMBLOB NOT NULL,
  d80  MEDIUMBLOB NOT NULL,
  d81  MEDIUMBLOB NOT NULL,
  d82  MEDIUMBLOB NOT NULL,
  d83  MEDIUMBLOB NOT NULL,
  d84  MEDIUMBLOB NOT NULL,
  d85  MEDIUMBLOB NOT NULL,
  d86  MEDIUMBLOB NOT NULL,
  d87  MEDIUMBLOB NOT NULL,
  d88  MEDIUMBLOB NOT NULL,
  d89  MEDIUMBLOB NOT NULL,
  d90  MEDIUMBLOB NOT NULL,
  d91  MEDIUMBLOB NOT NULL,
  d92  MEDIUMBLOB NOT NULL,
  d93  MEDIUMBLOB NOT NULL,
  d94  MEDIUMBLOB NOT NULL,
  d95  MEDIUMBLOB NOT NULL,
  d96  MEDIUMBLOB NOT NULL,
  d97  MEDIUMBLOB NOT NULL,
  d98  MEDIUMBLOB NOT NULL,
  d99  MEDIUMBLOB NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (slot) PARTITIONS 256;

INSERT INTO reference_directory (slot, d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11, d12, d13, d14, d15, d16, d17, d18, d19, d20, d21, d22, d23, d24, d25, d26, d27, d28, d29, d30, d31, d32, d33, d34, d35, d36, d37, d38, d39, d40, d41, d42, d43, d44, d45, d46, d47, d48, d49, d50, d51, d52, d53, d54, d55, d56, d57, d58, d59, d60, d61, d62, d63, d64, d65, d66, d67, d68, d69, d70, d71, d72, d73, d74, d75, d76, d77, d78, d79, d80, d81, d82, d83, d84, d85, d86, d87, d88, d89, d90, d91, d92, d93, d94, d95, d96, d97, d98, d99)
SELECT a.n * 16 + b.n, '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', ''
FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL
      SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL
      SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL
      SELECT 15) a,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL
      SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL
      SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL
      SELECT 15) b
WHERE NOT EXISTS (SELECT 1 FROM reference_directory);

CREATE TABLE IF NOT EXISTS reference_backfill (
  next_id     BIGINT      NOT NULL,
  until_id    BIGINT      NULL,
  begin_after DATETIME(6) NULL
) ENGINE=InnoDB;

-- A database with no history is complete at once (until_id 0) and has nothing to wait for
-- (begin_after NULL), so that every new database migrates to the same rows.
INSERT INTO reference_backfill (next_id, until_id, begin_after)
SELECT 0, IF(h.history, NULL, 0), IF(h.history, NOW(6) + INTERVAL 15 MINUTE, NULL)
FROM (SELECT EXISTS (SELECT 1 FROM events) OR EXISTS (SELECT 1 FROM event_pages) AS history) h
WHERE NOT EXISTS (SELECT 1 FROM reference_backfill);
