package mysqltest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql/keystore"
)

// LoadKeys stores n unexpired idempotency keys (expiring in ttl) with their directory entries, as
// if n keyed creates had committed, for the benchmark's scratch databases (it creates the sequence
// table there). Their hashes are SHA-256 of "bench-key-<n>", so no request names them; each
// answer names an event that does not exist, which only a replay would read. The keys are inserted
// by INSERT ... SELECT in chunks, and the directories written once at the end, from the keys, by
// one UPDATE. Nothing in the product calls it.
func LoadKeys(ctx context.Context, db *sql.DB, n int64, ttl time.Duration, onChunk func(done int64)) error {
	if err := ensureSeq(ctx, db, n); err != nil {
		return err
	}
	insert := fmt.Sprintf(`INSERT INTO idempotency_keys (bucket, key_hash, fingerprint, status, body, event_id, created_at, expires_at)
SELECT CONV(HEX(LEFT(h, 4)), 16, 10) %% %d, h, h, 201, '{"id":0}', n, NOW(6),
  FROM_UNIXTIME(CEIL(UNIX_TIMESTAMP(NOW(6) + INTERVAL ? MICROSECOND)))
FROM (SELECT n, UNHEX(SHA2(CONCAT('bench-key-', n), 256)) AS h FROM %s WHERE n BETWEEN ? AND ?) s`, keystore.KeyBuckets, seqTable)
	for lo := int64(1); lo <= n; lo += loadChunk {
		hi := min(lo+loadChunk-1, n)
		if _, err := db.ExecContext(ctx, insert, ttl.Microseconds(), lo, hi); err != nil {
			return fmt.Errorf("load keys: %w", err)
		}
		if onChunk != nil {
			onChunk(hi)
		}
	}
	// The directories: 4 bytes of each key's hash (bytes 9-12) and its expiry in Unix seconds,
	// rounded up, big-endian, as the key store writes them (the session's time zone is UTC): the
	// keys' rows expire at that second too, never before their entries.
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION group_concat_max_len = 1073741824"); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, `UPDATE idempotency_buckets b JOIN (
  SELECT bucket, GROUP_CONCAT(CONCAT(SUBSTRING(key_hash, 9, 4),
    UNHEX(LPAD(HEX(CAST(CEIL(UNIX_TIMESTAMP(expires_at)) AS UNSIGNED)), 8, '0'))) SEPARATOR '') AS d
  FROM idempotency_keys GROUP BY bucket) k ON k.bucket = b.bucket
SET b.directory = CONCAT(b.directory, k.d)`)
	if err != nil {
		return fmt.Errorf("load keys: directories: %w", err)
	}
	// The connection is not returned to the pool with the session variable set.
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	return nil
}
