-- Idempotency keys (issue 16): a create that carries an Idempotency-Key stores the key, a
-- fingerprint of its request and the answer it gave, in the transaction that stores its event, so
-- that a retry gets the same answer instead of a second event (internal/mysql/idempotency.go,
-- sql/idempotency.sql).
--
-- Without a unique index, a key's uniqueness comes from a lock, and without any index every lookup
-- is a scan: the two tables below keep both bounded, whatever the number of keys stored.
--
-- idempotency_buckets: 4,096 rows created here and never added to or removed, one per bucket. A
-- key's bucket is computed in Go from the SHA-256 of its scope and key (the top bits, modulo 4,096)
-- and stored as a column; every writer of a key locks its bucket's row first (an UPDATE, which
-- waits for that row only: sql/idempotency.sql), so two requests with one key are serialised, and
-- the second sees what the first committed. Each row also holds the bucket's directory: 8 bytes
-- per unexpired key (4 bytes of its hash, 4 of its expiry), read right after the lock, so that
-- telling a fresh key from a stored one reads this one row, not the keys. Partitioned by
-- HASH(bucket) into 256 partitions of 16 rows: reading a bucket scans 16 rows, whose directories
-- InnoDB copies to evaluate the WHERE, so a lookup reads about (keys stored x 8 bytes / 256):
-- 31 KB at 1,000,000 keys. More partitions
-- would read less, but every partition is a file, which every migration creates (256 took 0.4 s on
-- the loaded test machine, 1,024 took 5.5 s) and every statement on the table pays for.
--
-- idempotency_keys: one row per stored key (and per expired key until the sweeper prunes it): the
-- hash of scope and key, the request's fingerprint, the answer, the event. Read only when a
-- directory says the key may be stored (a replay), and then only in the partition of its bucket.
--
-- Partitioning is physical design, not an index or a key: the schema rules hold (CheckRules).
-- Every statement is idempotent: tables IF NOT EXISTS, the buckets inserted only into an empty table
-- (in one statement, so all or none).
CREATE TABLE IF NOT EXISTS idempotency_buckets (
  bucket    INT        NOT NULL,
  directory MEDIUMBLOB NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (bucket) PARTITIONS 256;

INSERT INTO idempotency_buckets (bucket, directory)
SELECT a.n * 256 + b.n * 16 + c.n, ''
FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL
      SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL
      SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL
      SELECT 15) a,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL
      SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL
      SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL
      SELECT 15) b,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL
      SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL
      SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL
      SELECT 15) c
WHERE NOT EXISTS (SELECT 1 FROM idempotency_buckets);

CREATE TABLE IF NOT EXISTS idempotency_keys (
  bucket      INT            NOT NULL,
  key_hash    BINARY(32)     NOT NULL,
  fingerprint BINARY(32)     NOT NULL,
  status      SMALLINT       NOT NULL,
  body        VARBINARY(4096) NOT NULL,
  event_id    BIGINT         NOT NULL,
  created_at  DATETIME(6)    NOT NULL,
  expires_at  DATETIME(6)    NOT NULL
) ENGINE=InnoDB
PARTITION BY HASH (bucket) PARTITIONS 32;
