-- Tasks (issue 14): events that carry a webhook, delivered with retries, in creation order per
-- reference (internal/mysql/tasks.go, sql/tasks.sql).
--
-- events gets the task's columns, NULL for every other kind: url, payload (the exact body every
-- delivery posts, up to 256 KiB), reference_id, max_retries, and position, which orders a
-- reference's tasks: it comes from the reference's bucket (below), so it increases in the order
-- the tasks were committed, whichever process took their ids. reference_id compares byte for byte
-- (utf8mb4_bin): "A" and "a" are two references, as their routing hashes are. Columns at the end, one ALTER
-- (atomic; INSTANT on MySQL 8); a rerun gets 1060 "duplicate column", which the runner treats as
-- applied.
ALTER TABLE events
  ADD COLUMN url          VARCHAR(2048) NULL,
  ADD COLUMN payload      MEDIUMBLOB    NULL,
  ADD COLUMN reference_id VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  ADD COLUMN max_retries  INT           NULL,
  ADD COLUMN position     BIGINT        NULL;

-- A task waiting for an earlier task of its reference is `queued` (state 2): open, but no claim
-- takes it. It gets a partition of its own, so that the claims (state 0 and 1, `open`) never scan
-- the queue, however long it is, and the promotion of a reference's next task scans only the queue.
-- REORGANIZE copies only the `open` partition (the pending set), never the history. A rerun gets
-- 1517 "duplicate partition name", which the runner treats as applied.
ALTER TABLE events REORGANIZE PARTITION open INTO (
  PARTITION open   VALUES LESS THAN (2),
  PARTITION queued VALUES LESS THAN (10)
);

-- task_buckets: 64 rows created here and never added to or removed. A reference's bucket is its
-- routing hash (murmur3 of the reference id) modulo 64. A create locks its references' buckets
-- first and takes its tasks' positions from them: `position` is the bucket's sequence, advanced
-- under the lock, so positions increase in commit order within a bucket, hence within a reference,
-- and two creates of one reference never decide its head at once. A manual retry locks the bucket
-- too. A settlement does not: it locks the head it settles, which a create queueing behind that head
-- locks first (internal/mysql/sql/tasks.sql). So only creates and retries meet on a bucket, and a
-- bucket lock is held for one create transaction (a few milliseconds). Not partitioned: every bucket
-- statement scans the 64 short rows once, and its UPDATE's semi-consistent read waits only for the
-- buckets it names. The tasks benchmark measured the alternatives: 4,096 buckets in 64 partitions
-- (one partition opened, and 64 rows scanned, per bucket named) delivered 0.74x the unordered rate;
-- 64 buckets, one per partition, 0.91x; these 64 unpartitioned rows 0.87x with the highest ordered
-- rate (3,070 against 2,800 tasks/s); 4,096 in 16 partitions 0.66x. Fewer buckets serialise more
-- creates of unrelated references, which matters only across API processes (creates in one process
-- already share one transaction at a time): at 64, two concurrent single-task creates meet on a
-- bucket one time in 64.
CREATE TABLE IF NOT EXISTS task_buckets (
  bucket   INT    NOT NULL,
  position BIGINT NOT NULL
) ENGINE=InnoDB;

INSERT INTO task_buckets (bucket, position)
SELECT a.n * 4 + b.n, 0
FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL
      SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL
      SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL
      SELECT 15) a,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3) b
WHERE NOT EXISTS (SELECT 1 FROM task_buckets);

-- task_attempts: one row per delivery attempt, written in the transaction that records the
-- attempt's outcome (settles the task, or records its failure), so an attempt is recorded once.
-- Read only by GET /events/{id}/attempts, pruned by HASH(event_id) to one of 32 partitions: its
-- cost is a thirty-second of the attempts ever made (the flat-reads issue gives history its shape).
CREATE TABLE IF NOT EXISTS task_attempts (
  event_id    BIGINT        NOT NULL,
  number      INT           NOT NULL,
  started_at  DATETIME(6)   NOT NULL,
  duration_us BIGINT        NOT NULL,
  status      INT           NOT NULL,
  error       VARCHAR(1024) NULL,
  claim_id    VARCHAR(32)   NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (event_id) PARTITIONS 32;
