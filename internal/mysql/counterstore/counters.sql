-- counter_buckets, t_counter, t_counter_sum and counter_notifications
-- (migrations/0008_counters.sql): the counter service (counters.go). One transaction per batch of
-- messages: lock the buckets of the batch's users and entities, read the entities' directories and
-- the users' sums, insert the facts, create or update the sums, write the directories, record the
-- notifications, commit; then publish the notifications and mark them published. LockCounterBuckets,
-- ReadCounterBuckets and WriteCounterDirectories are run by the bucket lock with its directory that
-- keys and counters share (internal/mysql/bucket, bucketTable in counters.go). `bucket IN (...)`
-- prunes every statement to the partitions of the buckets named; the IN lists are expanded to one ?
-- per value.
--
-- user_id and entity_type are compared as bytes, CAST(... AS BINARY), as Go compares them (the
-- counts are keyed by them in maps, the entities hashed with them): the columns' utf8mb4_bin
-- collation ignores trailing spaces (PAD SPACE), so a plain `entity_type = ?` took "t" and "t "
-- for one count, and a batch that changed "t" updated both rows ("updated 2 of 1 counts") on every
-- delivery. The consumer refuses trailing spaces (exactlyonce.CheckName); the cast keeps the counts
-- stored before apart. Every statement scans its partitions anyway (no index), so the cast costs no
-- plan.
--
-- Lock order, the same everywhere: the buckets (one statement, in the order of its scan), then
-- the sum rows of those buckets' users, then the rows inserted. Only the consumer locks buckets;
-- the sweeper and the API read without locks, and the sweeper's deletes touch rows that no
-- consumer reads or writes (old facts, published notifications).

-- name: LockCounterBuckets
-- The lock that makes an entity counted once and a sum row created once without a unique index:
-- every transaction that changes a count first takes the row locks of its users' buckets (which
-- guard their sum rows, created or not) and of its entities' buckets (which guard their
-- directories), here, and holds them to its commit. Two messages for one entity or one user are
-- serialised, and the second reads what the first committed. An UPDATE, not SELECT ... FOR
-- UPDATE, because at READ COMMITTED an UPDATE reads the last committed version of a row another
-- transaction holds and waits only if that row matches (semi-consistent read), so a bucket held
-- elsewhere in the same partition does not make us wait; version changes so that the rows matched
-- are the rows affected (the caller checks every bucket exists). Rows are locked in the order of
-- the scan (partition, then row), the same for every transaction; a deadlock that still happens
-- (a transaction that waits here while holding nothing cannot deadlock, so it would need a bug)
-- is retried by inTx.
UPDATE counter_buckets SET version = version + 1 WHERE bucket IN (/*ids*/);

-- name: ReadCounterBuckets
-- The directories of the buckets locked above, and the database's clock, which decides when a read
-- entity is forgotten (a consistent read: at READ COMMITTED it sees the last commit, and the
-- buckets' locks keep every other writer of these rows out until we commit). No lock.
SELECT bucket, directory, NOW(6) FROM counter_directories WHERE bucket IN (/*ids*/);

-- name: ReadCounterSums
-- The counts the batch names (a consistent read, no lock): their users' bucket locks, held, keep
-- every other writer of these rows out until we commit, and keep a missing row missing. Scans the
-- partitions of the users' buckets: its cost grows with the number of counts (users times types)
-- in a partition, not with the entities; it returns only the batch's counts (/*keys*/ is one
-- (?, ?) per count: user, type), not every count of its users, which a user with thousands of
-- types would make thousands of rows for every message.
SELECT entity_type, user_id, sum, version FROM t_counter_sum
WHERE bucket IN (/*ids*/) AND (CAST(user_id AS BINARY), CAST(entity_type AS BINARY)) IN (/*keys*/);

-- name: InsertCounterSums
-- The first change of a count creates its row: exactly once, because its user's bucket is locked
-- and ReadCounterSums found no row. /*rows*/ is one (?, ?, ?, ?, ?, NOW(6)) per count.
INSERT INTO t_counter_sum (bucket, entity_type, user_id, sum, version, updated_at) VALUES /*rows*/;

-- name: UpdateCounterSums
-- The counts this batch changed, set to what the batch computed from the values read above
-- (under the users' bucket locks, so no change is lost). Row locks on the matched rows, which no
-- one else writes (they wait on the bucket locks first). /*sums*/ and /*versions*/ are one
-- WHEN CAST(user_id AS BINARY) = ? AND CAST(entity_type AS BINARY) = ? THEN ? per count; /*keys*/
-- one (?, ?) per count.
UPDATE t_counter_sum
SET sum = CASE /*sums*/ ELSE sum END, version = CASE /*versions*/ ELSE version END, updated_at = NOW(6)
WHERE bucket IN (/*ids*/) AND (CAST(user_id AS BINARY), CAST(entity_type AS BINARY)) IN (/*keys*/);

-- name: InsertCounterFacts
-- The facts of the batch's changes: an added row (kind 1) for an entity counted from now on, a read
-- row (kind 2) for an entity read (counted or not before). Written once per entity and kind,
-- because the entity's bucket is locked and its directory said the fact was new. No lock beyond
-- the rows inserted. /*rows*/ is one (?, ?, ?, ?, ?, ?, NOW(6)) per fact.
INSERT INTO t_counter (bucket, kind, entity_hash, entity_type, user_id, entity_id, at) VALUES /*rows*/;

-- name: WriteCounterDirectories
-- The directories of the entity buckets this batch changed: their remembered entries and the new
-- or changed ones, under the buckets' locks taken by LockCounterBuckets (so nobody else writes
-- these rows, and this UPDATE's own row locks never wait). Entries of read entities past the
-- retention are dropped whenever a bucket is written. /*cases*/ is one WHEN ? THEN ? per bucket.
UPDATE counter_directories SET directory = CASE bucket /*cases*/ END WHERE bucket IN (/*ids*/);

-- name: InsertCounterNotifications
-- The batch's notifications, unpublished (state 0), in the transaction of the changes they report:
-- both commit or neither. No lock beyond the rows inserted. /*rows*/ is one (?, 0, ?, NOW(6)) per
-- notification.
INSERT INTO counter_notifications (id, state, body, created_at) VALUES /*rows*/;

-- name: MarkCounterNotificationsPublished
-- Notifications published (autocommit, after the publish). Scans the pending partition only; it
-- locks the rows it changes, and at READ COMMITTED skips rows other transactions hold unless
-- their last committed version matches (a concurrent sweeper republishing the same ones: one of
-- the two waits a moment, then matches nothing). /*ids*/ is one ? per notification id.
UPDATE counter_notifications SET state = 1, published_at = NOW(6) WHERE state = 0 AND id IN (/*ids*/);

-- name: UnpublishedCounterNotifications
-- The sweeper's: notifications still unpublished ? microseconds after they were recorded (their
-- consumer's publish failed, or it died between its commit and its publish). A consistent read
-- of the pending partition, no lock: no lock is held across the publish that follows, and a
-- notification published twice is a repeat its consumers drop by id or version. At most ?.
SELECT id, body FROM counter_notifications
WHERE state = 0 AND created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?;

-- name: PruneCounterNotifications
-- The sweeper's pruning of notifications published more than ? seconds ago, in bounded batches
-- (autocommit, LIMIT ?): a scan of the published partition, oldest first, that ends once it has
-- found ? of them. It locks the rows it deletes, which nothing else reads with a lock.
DELETE FROM counter_notifications WHERE state = 1 AND published_at < NOW(6) - INTERVAL ? SECOND LIMIT ?;

-- name: FirstOldReadCounterEntity
-- The sweeper's: the bucket of one entity read more than ? seconds ago, which says the
-- subpartition OldReadCounterEntities reads next; none, nothing to prune. A consistent read of the
-- read partition until the first such row, no lock.
SELECT bucket FROM t_counter WHERE kind = 2 AND at < NOW(6) - INTERVAL ? SECOND LIMIT 1;

-- name: OldReadCounterEntities
-- The sweeper's: entities read more than ? seconds ago (the retention, longer than the queue's
-- 14 days), whose facts may go: no message for them can still be delivered. A consistent read
-- of one subpartition of the read partition (/*subpartition*/ is was_readsp0 to was_readsp7, the
-- names MariaDB and MySQL give HASH subpartitions), no lock. At most ?. One subpartition, so that
-- DeleteCounterEntities, whose buckets are then all of it, scans one eighth of the facts: entities
-- of every bucket made it scan all of them, the counted entities' too, on every sweep that pruned.
SELECT bucket, entity_hash FROM t_counter PARTITION (/*subpartition*/) WHERE kind = 2 AND at < NOW(6) - INTERVAL ? SECOND LIMIT ?;

-- name: DeleteCounterEntities
-- The facts of the entities found above (autocommit): their read row and their added row, if any,
-- both older than the retention. An entity's directory entry expires at the same time, so a
-- message that somehow came after would find the entity new; `at <` keeps such a message's new
-- fact. Locks the rows it deletes, which no consumer reads or writes (it only inserts). Its
-- buckets are of one subpartition (OldReadCounterEntities), so it scans that subpartition of each
-- kind. /*hashes*/ is one ? per entity hash.
DELETE FROM t_counter WHERE bucket IN (/*ids*/) AND entity_hash IN (/*hashes*/) AND at < NOW(6) - INTERVAL ? SECOND;

-- name: ReconcileCounterSums
-- The sweeper's reconciliation: the counts of the users of a few buckets (at most ?), each stored
-- sum beside the number of its entities counted by their facts (an added row and no read row), and
-- the number of entities with a fact twice (which the directories should make impossible), in one
-- statement and so one consistent snapshot: a consumer's commit is seen whole or not at all. No
-- lock. t_counter has no way to a count's facts but a scan of the subpartition of each kind that
-- holds its user's bucket (HASH(bucket), 8 subpartitions): the facts of every bucket named are read
-- in that one scan and grouped, where reading them count by count scanned the subpartitions twice
-- per count (a sweep's 50 counts: 100 scans, 12.5 times the fact table). The caller names buckets
-- of one subpartition (the same remainder modulo 8), so the statement reads one eighth of the facts.
-- The texts are grouped and joined as bytes, as everywhere here (a type "t " is not "t").
--
-- The facts are read as the pruning will leave them (? and ? are the retention, in seconds): an
-- entity with a read fact older than the retention is forgotten (its directory entry has expired),
-- and DeleteCounterEntities will delete its facts older than the retention; an "added" after the
-- expiry counts it again with a new fact. Until a sweep prunes it, that entity has an old added
-- fact, an old read fact and a new added fact, and read as they are they made a mismatch (counted
-- 0 against a sum of 1, an added fact twice): an error line and an alarm for nothing.
SELECT s.entity_type, s.user_id, s.sum, COALESCE(f.counted, 0), COALESCE(f.duplicated, 0)
FROM (SELECT bucket, entity_type, user_id, sum FROM t_counter_sum WHERE bucket IN (/*ids*/) LIMIT ?) s
LEFT JOIN (
  SELECT bucket, bt, bu, SUM(a = 1 AND r = 0) AS counted, SUM(a > 1 OR r > 1) AS duplicated
  FROM (SELECT bucket, bt, bu, a - IF(ro > 0, ao, 0) AS a, r - IF(ro > 0, ro, 0) AS r
        FROM (SELECT bucket, CAST(entity_type AS BINARY) AS bt, CAST(user_id AS BINARY) AS bu,
                     SUM(kind = 1) AS a, SUM(kind = 2) AS r,
                     SUM(kind = 1 AND at < NOW(6) - INTERVAL ? SECOND) AS ao,
                     SUM(kind = 2 AND at < NOW(6) - INTERVAL ? SECOND) AS ro
              FROM t_counter WHERE bucket IN (/*ids*/) GROUP BY bucket, bt, bu, entity_hash) g) e
  GROUP BY bucket, bt, bu) f
ON f.bucket = s.bucket AND f.bt = CAST(s.entity_type AS BINARY) AND f.bu = CAST(s.user_id AS BINARY);

-- name: CounterSumsOfUser
-- GET /counters/{userId}: a page of a user's counts, the types after a cursor in byte order, at
-- most ? (a consistent read, no lock), from their bucket's partition. Bounded by the page, as a
-- user may have any number of types: the answer must fit in a Lambda's (6 MB).
SELECT entity_type, sum, version FROM t_counter_sum
WHERE bucket = ? AND CAST(user_id AS BINARY) = ? AND CAST(entity_type AS BINARY) > ?
ORDER BY CAST(entity_type AS BINARY) LIMIT ?;

-- name: CounterSumOf
-- GET /counters/{userId}/{entityType}: one count (a consistent read, no lock).
SELECT sum, version FROM t_counter_sum WHERE bucket = ? AND CAST(user_id AS BINARY) = ? AND CAST(entity_type AS BINARY) = ?;
