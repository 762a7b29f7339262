-- idempotency_buckets and idempotency_keys (migrations/0006_idempotency_keys.sql): the creates that
-- carry an Idempotency-Key. One transaction per group of keyed creates (idempotency.go): lock the
-- buckets, read their directories, read the stored keys the directories point at, insert the new
-- events and keys, write the directories, commit. `bucket IN (...)` prunes every statement to the
-- partitions of the buckets named; the IN lists are expanded to one ? per bucket or hash.

-- name: LockKeyBuckets
-- The lock that makes a key unique without a unique index: every transaction that writes a key
-- first locks its bucket's row here, and holds it to its commit, so two requests with one key (or
-- two keys of one bucket) are serialised, and the second reads what the first committed: a
-- concurrent duplicate waits here for the first one's outcome (bounded by IDEMPOTENCY_WAIT through
-- the statement's context). The same statement reads the buckets' directories and the database's
-- clock, which decides expiry. `bucket IN (...)` prunes the scan to the buckets' partitions, 16
-- rows each; a locking read at READ COMMITTED waits for a row another transaction holds even if it
-- is not one of ours, so a create also waits for one holding another bucket of the same partition
-- (16 rows share a partition), for one short transaction. Rows are locked in the order of the scan
-- (partition, then row), the same for every transaction, and a scan releases at once the rows that
-- do not match, so lockers cannot deadlock each other.
SELECT bucket, directory, NOW(6) FROM idempotency_buckets WHERE bucket IN (/*ids*/) FOR UPDATE;

-- name: FindKeys
-- The stored answers of keys whose directory entries say they are stored and unexpired at ? (the
-- clock LockKeyBuckets read): a replay, or a mismatch. A consistent read, no lock: the buckets' locks
-- keep these keys from being written meanwhile. It scans the partitions of the buckets named,
-- where the keys of every bucket of the partition are, so its cost grows with the keys stored
-- (a replay's cost, not a fresh key's: a fresh key's directory says it is absent and this does not
-- run).
SELECT key_hash, fingerprint, status, body, event_id FROM idempotency_keys
WHERE bucket IN (/*ids*/) AND key_hash IN (/*hashes*/) AND expires_at > ?;

-- name: InsertKeyedEvents
-- The events of fresh keyed creates, in the transaction that stores their keys: both commit or
-- neither. /*rows*/ is one (?, ?, NULL, 0, NOW(6), NULL, NULL, 0) per pending event (POST
-- /events/async) and one (?, ?, ?, 10, NOW(6), NOW(6), 'api', 1) per event processed at birth (POST
-- /events), as InsertPendingRows and InsertProcessed in events.sql insert them, with the routing
-- hash the agents' ranges split by. No lock beyond the rows inserted; the ids come from the status
-- counter.
INSERT INTO events (id, routing_hash, value, state, created_at, processed_at, processed_by, process_count) VALUES /*rows*/;

-- name: InsertKeys
-- The fresh keys with the answers their creates gave, expiring at ? each (the clock read above
-- plus IDEMPOTENCY_TTL). Unique because their buckets' rows are locked and the directories said
-- they were absent. /*rows*/ is one (?, ?, ?, ?, ?, ?, NOW(6), ?) per key.
INSERT INTO idempotency_keys (bucket, key_hash, fingerprint, status, body, event_id, created_at, expires_at)
VALUES /*rows*/;

-- name: WriteKeyDirectories
-- The directories of the buckets that got new keys: their unexpired entries and the new ones,
-- under the row locks LockKeyBuckets took. Expired entries are dropped whenever a bucket is
-- written. /*cases*/ is one WHEN ? THEN ? per bucket.
UPDATE idempotency_buckets SET directory = CASE bucket /*cases*/ END WHERE bucket IN (/*ids*/);

-- name: PruneKeys
-- The sweeper's pruning of expired keys, in bounded batches (autocommit, LIMIT ?): a scan of the
-- keys that ends once it has found ? expired ones (older keys sit at the front of each partition).
-- It locks the rows it deletes, which no create reads with a lock (FindKeys is a consistent read),
-- so no create waits for it; at worst it waits, briefly, for a create inserting a key to commit.
-- Directory entries of pruned keys are expired too, and are dropped the next time their bucket is
-- written.
DELETE FROM idempotency_keys WHERE expires_at <= NOW(6) LIMIT ?;
