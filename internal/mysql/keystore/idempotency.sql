-- idempotency_buckets and idempotency_keys (migrations/0006_idempotency_keys.sql): the creates that
-- carry an Idempotency-Key. One transaction per group of keyed creates (idempotency.go): lock the
-- buckets and append the new keys' entries to their directories, read the directories back, read
-- the stored keys they point at, insert the new events and keys, commit; a directory is rewritten
-- only when a quarter of it has expired. ReadKeyBuckets and WriteKeyDirectories are run by the
-- bucket lock with its directory that keys and counters share (internal/mysql/bucket, keyBuckets in
-- keys.go). `bucket IN (...)` prunes every statement to the partitions of the buckets named; the
-- IN lists are expanded to one ? per bucket or hash.

-- name: FreshKeyBuckets
-- The fast path of a group whose keys are all fresh, the common case: it locks and appends to the
-- buckets whose directories show none of the group's keys and whose oldest entry expired less than
-- a quarter of the TTL ago, and leaves the others unlocked and unchanged: at READ COMMITTED an UPDATE
-- evaluates its WHERE on the last committed version of a row another transaction holds, waits
-- only if that version matches, and evaluates it again, on what that transaction committed, once
-- it has the lock; a row that does not match is released. So a duplicate in flight elsewhere
-- makes its bucket wait, then fail the test once the duplicate commits its entry. When every
-- bucket changed (the affected rows), no key was stored, and the group goes on to insert its
-- events and keys without reading a directory; when none changed, the careful path (below) runs
-- in the same transaction; when some did, the transaction is rolled back and run again carefully.
-- /*cases*/ as in LockKeyBuckets; /*fresh*/ is one WHEN ? THEN LOCATE(?, directory) = 0 [AND ...]
-- per bucket; the test of the oldest entry, the same for every bucket, is written once.
UPDATE idempotency_buckets
SET directory = CONCAT(directory, CASE bucket /*cases*/ END, UNHEX(LPAD(HEX(CEIL(UNIX_TIMESTAMP(NOW(6)))+?),8,0)))
WHERE bucket IN (/*ids*/) AND (directory = '' OR SUBSTRING(directory, 5, 4) >= UNHEX(LPAD(HEX(CEIL(UNIX_TIMESTAMP(NOW(6)))-?),8,0)))
  AND CASE bucket /*fresh*/ END;

-- name: LockKeyBuckets
-- The careful path's lock, which makes a key unique without a unique index: every transaction that
-- writes a key first locks its bucket's row here (or in FreshKeyBuckets), and holds it to its commit, so two requests with one key (or
-- two keys of one bucket) are serialised, and the second reads what the first committed: a
-- concurrent duplicate waits here for the first one's outcome (bounded by IDEMPOTENCY_WAIT through
-- the statement's context). An UPDATE, not a locking SELECT: at READ COMMITTED an UPDATE reads the
-- last committed version of a row another transaction holds and waits only if that version
-- matches (a semi-consistent read), so a create waits for its own buckets only, never for another
-- bucket of the same partition (16 share one); a locking SELECT waits for every held row it
-- scans. The same statement appends each key's directory entry (4 bytes of its hash, its expiry
-- from the database's clock: NOW(6) plus the TTL's seconds, rounded up), optimistically: if the
-- directory already held the key, the transaction reads the stored answer and, for a group with
-- nothing fresh, rolls back, taking the entry out again. Every entry a statement appends has the
-- same expiry (NOW(6) is one instant for the whole statement), written once, at the end: /*cases*/
-- is one WHEN ? THEN ? per bucket, its key's 4 bytes, or, for a bucket with several new keys,
-- WHEN ? THEN CONCAT(?, <expiry>, ?) (every entry but the last with its expiry), so that the
-- statement's text, which the server parses for every group, grows by about 20 bytes a key and
-- not 300. Rows are locked in the order of the scan (partition, then row), the same for every
-- transaction, so lockers of several buckets cannot deadlock each other.
UPDATE idempotency_buckets
SET directory = CONCAT(directory, CASE bucket /*cases*/ END, UNHEX(LPAD(HEX(CEIL(UNIX_TIMESTAMP(NOW(6)))+?),8,0)))
WHERE bucket IN (/*ids*/);

-- name: ReadKeyBuckets
-- The locked buckets' directories as this transaction left them (what was committed, then its own
-- entries at the end), and the database's clock, which decides expiry. A consistent read, no lock
-- of its own: the rows are locked by LockKeyBuckets, so what was committed cannot change under it.
-- It scans the 16 rows of each bucket's partition and copies their directories: about (keys
-- stored x 8 bytes / 256) per bucket, 31 KB at 1,000,000 keys.
SELECT bucket, directory, NOW(6) FROM idempotency_buckets WHERE bucket IN (/*ids*/);

-- name: FindKeys
-- The stored answers of keys whose directory entries say they are stored and unexpired at ? (the
-- clock ReadKeyBuckets read): a replay, or a mismatch. A consistent read, no lock: the buckets' locks
-- keep these keys from being written meanwhile. It scans the partitions of the buckets named,
-- where the keys of every bucket of the partition are, so its cost grows with the keys stored
-- (a replay's cost, not a fresh key's: a fresh key's directory says it is absent and this does not
-- run).
-- A key stored again after its entry expired may still have its old row, unpruned and (its row
-- outliving its entry by a second or two) unexpired: the caller keeps the row that expires last.
SELECT key_hash, fingerprint, status, body, event_id, expires_at FROM idempotency_keys
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
-- The fresh keys with the answers their creates gave, each expiring at ? (its directory entry's
-- second: the database's clock plus IDEMPOTENCY_TTL, rounded up to a second, so the two agree). Unique because their buckets' rows are locked and the directories said
-- they were absent. /*rows*/ is one (?, ?, ?, ?, ?, ?, NOW(6), ?) per key.
INSERT INTO idempotency_keys (bucket, key_hash, fingerprint, status, body, event_id, created_at, expires_at)
VALUES /*rows*/;

-- name: WriteKeyDirectories
-- A rewrite of directories whose oldest entry expired more than a quarter of the TTL ago (their
-- live entries and this transaction's), or that hold an entry appended for a key that turned out
-- to be stored: under the row locks LockKeyBuckets took, so nothing else writes them meanwhile.
-- /*cases*/ is one WHEN ? THEN ? per bucket.
UPDATE idempotency_buckets SET directory = CASE bucket /*cases*/ END WHERE bucket IN (/*ids*/);

-- name: PruneKeys
-- The sweeper's pruning of expired keys, in bounded batches (autocommit, LIMIT ?): a scan of the
-- keys that ends once it has found ? expired ones (older keys sit at the front of each partition).
-- It locks the rows it deletes, which no create reads with a lock (FindKeys is a consistent read),
-- so no create waits for it; at worst it waits, briefly, for a create inserting a key to commit.
-- Directory entries of pruned keys are expired too, and are dropped when their bucket is next
-- rewritten (a quarter of it expired).
DELETE FROM idempotency_keys WHERE expires_at <= NOW(6) LIMIT ?;
