-- The counter service (issue 17): counts of entities per user and entity type, fed by the
-- `counters` queue, each change answered by a notification (internal/counters,
-- internal/mysql/counters.go, sql/counters.sql).
--
-- Without a unique index, an entity is counted once and a sum row is created once because of a
-- lock, and without any index every lookup is a scan: the tables below keep both bounded,
-- whatever the number of entities stored. The shape is the idempotency keys' (0006): lock rows
-- seeded in advance ("buckets"), a bucket computed in Go from a hash and stored as a column, and a
-- directory in each bucket's row, so that telling a new entity from a stored one reads one row.
--
-- counter_buckets: 8,192 lock rows created here and never added to or removed. Two kinds of
-- bucket share them: a user's bucket (from the SHA-256 of the user id) is the lock of that user's
-- sums, and an entity's bucket (from the SHA-256 of entity type, user and entity id) the lock of
-- the directory of the entities that hash to it. Every message locks both of its buckets first,
-- all of a batch's in one statement. Partitioned by HASH(bucket) into 64 partitions of 128 thin
-- rows: a lock scans 128 rows of 12 bytes, whatever the history.
--
-- counter_directories: one row per bucket, its directory: 16 bytes per remembered entity (8 bytes
-- of its hash, 8 of the Unix microseconds it is remembered until: never for a counted entity, its
-- read time plus the retention for a read one). Apart from the lock rows so that locking does not
-- scan directories (measured on 1,000,000 entities: locking 20 buckets took 2 ms with thin rows,
-- 4-6 ms with the directories in them). Partitioned into 512 partitions of 16 rows: reading or
-- writing a directory scans 16 rows of about 16 bytes per 8,192 entities stored each (about 2 KB
-- at 1,000,000 entities: 32 KB per directory read). More partitions cost time at CREATE (about
-- 0.3 s more per 512 on the test machine).
--
-- t_counter: the entities' facts, written once and never updated: an `added` row (kind 1) when an
-- entity starts being counted, a `read` row (kind 2) when it is read (with or without an added row
-- before it: a read that arrives before its add is remembered too). An entity is counted while it
-- has an added row and no read row. Partitioned by kind, then by HASH(bucket) of the user, so the
-- sweeper's reconciliation of one key reads one subpartition of each kind and its pruning of old
-- read entities reads the `read` partition only. The consumer only inserts here.
--
-- t_counter_sum: one row per (entity type, user) with a count and a version that grows by one with
-- every change, created by the first change of its key under its user's bucket lock. Partitioned
-- by HASH(bucket) of the user into 512 partitions: a user's sums are in one partition, and reading
-- or writing them scans that partition, about 1/512 of the counts (users times types; 30,000
-- counts: about 60 rows).
--
-- counter_notifications: the outbox of result notifications, written in the transaction of the
-- change and published after its commit. Partitioned by state, so that marking a notification
-- published and finding the unpublished ones read only the unpublished (pending) partition.
--
-- Texts are compared as bytes (utf8mb4_bin): "A" and "a" are two users. Partitioning is physical
-- design, not an index or a key: the schema rules hold (CheckRules). Every statement is
-- idempotent: tables IF NOT EXISTS, the buckets inserted only into an empty table (one statement,
-- so all or none).
CREATE TABLE IF NOT EXISTS counter_buckets (
  bucket  INT    NOT NULL,
  version BIGINT NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (bucket) PARTITIONS 64;

INSERT INTO counter_buckets (bucket, version)
SELECT a.n * 4096 + b.n * 256 + c.n * 16 + d.n, 0
FROM (SELECT 0 AS n UNION ALL SELECT 1) a,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL
      SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL
      SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL
      SELECT 15) b,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL
      SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL
      SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL
      SELECT 15) c,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL
      SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL
      SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL
      SELECT 15) d
WHERE NOT EXISTS (SELECT 1 FROM counter_buckets);

CREATE TABLE IF NOT EXISTS counter_directories (
  bucket    INT        NOT NULL,
  directory MEDIUMBLOB NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (bucket) PARTITIONS 512;

INSERT INTO counter_directories (bucket, directory)
SELECT bucket, '' FROM counter_buckets WHERE NOT EXISTS (SELECT 1 FROM counter_directories);

CREATE TABLE IF NOT EXISTS t_counter (
  bucket      INT          NOT NULL,
  kind        TINYINT      NOT NULL,
  entity_hash BINARY(32)   NOT NULL,
  entity_type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  user_id     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  entity_id   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  at          DATETIME(6)  NOT NULL
) ENGINE=InnoDB
PARTITION BY LIST (kind)
SUBPARTITION BY HASH (bucket) SUBPARTITIONS 8 (
  PARTITION added VALUES IN (1),
  PARTITION was_read VALUES IN (2)
);

CREATE TABLE IF NOT EXISTS t_counter_sum (
  bucket      INT          NOT NULL,
  entity_type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  user_id     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  sum         BIGINT       NOT NULL,
  version     BIGINT       NOT NULL,
  updated_at  DATETIME(6)  NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (bucket) PARTITIONS 512;

CREATE TABLE IF NOT EXISTS counter_notifications (
  id           BINARY(16)      NOT NULL,
  state        TINYINT         NOT NULL,
  body         VARBINARY(4096) NOT NULL,
  created_at   DATETIME(6)     NOT NULL,
  published_at DATETIME(6)     NULL
) ENGINE=InnoDB
PARTITION BY LIST (state) (
  PARTITION pending   VALUES IN (0),
  PARTITION published VALUES IN (1)
);
