// Package keystore is the idempotency keys (idempotency.sql, migrations/0006_idempotency_keys.sql):
// the creates that carry an Idempotency-Key, stored with their keys and answers in one transaction
// per group (CreateKeyed), on a connection with autocommit off (mysql.DB.InManualTx); and the
// sweeper's pruning of expired keys. A keyed create of a task stores it through taskstore's
// InsertTasks, in the same transaction, after the keys' buckets.
package keystore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/groupcommit"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/bucket"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/routing"
)

// queryTexts are the statements of idempotency.sql.
type queryTexts struct {
	FreshKeyBuckets, LockKeyBuckets, ReadKeyBuckets, FindKeys, InsertKeyedEvents, InsertKeys, WriteKeyDirectories, PruneKeys string
}

//go:generate go run github.com/exactlyonce/exactlyonce/internal/mysql/querygen queries=queryTexts:idempotency.sql

// Store stores the keyed creates and prunes expired keys. Safe for concurrent use; build one per
// process, on the process's core handle.
type Store struct {
	core *mysql.DB
	db   *sql.DB
}

// New returns the Store on db.
func New(db *mysql.DB) *Store { return &Store{core: db, db: db.Pool()} }

// KeyBuckets is the number of buckets of idempotency keys: rows of idempotency_buckets created by
// migration 0006, each a lock and a directory (idempotency.sql). A key's bucket is computed
// from its hash (exactlyonce.KeyHash), in Go, and stored with it.
const KeyBuckets = 4096

// keyBuckets is the keys' buckets and their directories (internal/mysql/bucket): a directory entry
// is 4 bytes of a key's hash (bytes 8-11: the first four choose the bucket) and its expiry in Unix
// seconds, rounded up (big-endian, good until 2106). Small, because every lookup scans a
// partition of directories: a key whose 4 bytes match another's in its bucket (about one lookup in
// 2^32 / the bucket's keys) costs a read of the keys, never a wrong answer. A key's row never
// expires before its entry (keyRow). A key's bucket is locked by the statement that appends its
// entry (FreshKeyBuckets, LockKeyBuckets), so the table has no Lock of its own.
var keyBuckets = &bucket.Table{Name: "idempotency_buckets (migration 0006)", Buckets: KeyBuckets,
	Entry: bucket.Layout{HashFrom: 8, HashLen: 4, ExpiryLen: 4, Unit: time.Second},
	Read:  queries.ReadKeyBuckets, Write: queries.WriteKeyDirectories}

func keyBucket(hash [32]byte) int64 { return keyBuckets.Of(hash) }

// errKeyBusy marks a wait for a key's lock that outlasted KeyOptions.Wait.
var errKeyBusy = exactlyonce.Errorf(exactlyonce.ECONFLICT,
	"a request with this idempotency key is still in progress; retry later")

// errKeyLockWait marks a lock wait timeout on a key's bucket before opt.Wait has passed.
var errKeyLockWait = errors.New("lock wait timeout on an idempotency key's bucket")

// errNothingToWrite ends a transaction that found every key stored: it is rolled back.
// errCarefully ends a transaction whose fast path changed some buckets but not all (one may hold
// a key): it is rolled back, and run again by the careful path.
var errNothingToWrite = errors.New("every key is stored: nothing to write")

var errCarefully = errors.New("some keys may be stored: start again carefully")

// CreateKeyed stores the creates whose keys are not stored yet, each event with its key and its
// answer, in one transaction: all of them or none. The keys must be distinct. For a key stored
// and unexpired, nothing is written and its record is returned. A create whose key's lock is held
// by another transaction waits for it (a duplicate in flight elsewhere) up to opt.Wait, and then
// fails with an ECONFLICT error, having written nothing.
//
// One transaction for the lot (a group of concurrent requests, internal/api): its statements (four
// round trips for a group of fresh keys, the COMMIT's included; a few more for one with a stored
// key) are shared by every create in it. A group whose fast path changed some buckets and not all runs again carefully.
// Once only its COMMIT is left, it calls groupcommit.Release(ctx): on a Staged group's context
// the next group starts its statements while this one commits (a no-op on any other context).
func (s *Store) CreateKeyed(ctx context.Context, opt exactlyonce.KeyOptions, creates []exactlyonce.KeyedCreate) ([]exactlyonce.KeyedResult, error) {
	if len(creates) == 0 {
		return nil, nil
	}
	if len(creates) > exactlyonce.MaxKeyedGroup {
		return nil, fmt.Errorf("create keyed: %d creates, more than the %d of one group", len(creates), exactlyonce.MaxKeyedGroup)
	}
	if opt.TTL <= 0 || opt.Wait <= 0 {
		return nil, fmt.Errorf("create keyed: TTL and Wait must be positive, got %s and %s", opt.TTL, opt.Wait)
	}
	seen := make(map[[32]byte]bool, len(creates))
	for _, c := range creates {
		if seen[c.Key] {
			return nil, errors.New("create keyed: one key twice in one transaction")
		}
		seen[c.Key] = true
	}
	// An allocator that takes ids outside any transaction (block) takes them before ours begins:
	// a refill inside it would need a second connection while this one holds the buckets' locks,
	// and with every connection of the pool held by creates queued on those locks it would wait
	// for ever. Ids of the creates that turn out to be repeats are never used: gaps.
	var ids []int64
	if !s.core.IDsInTx() {
		var err error
		if ids, err = s.core.TakeIDs(ctx, nil, len(creates)); err != nil {
			return nil, mysql.Interpret("create keyed", err)
		}
	}
	waitUntil := exactlyonce.KeyWaitUntil(ctx, opt.Wait)
	var results []exactlyonce.KeyedResult
	// On a connection whose session has autocommit off: the first statement opens the
	// transaction, one round trip fewer than START TRANSACTION and it (mysql.DB.InManualTx).
	run := func(careful bool) error {
		return s.core.InManualTx(ctx, func(tx mysql.Conn) error {
			var err error
			results, err = s.createKeyed(ctx, tx, waitUntil, opt.TTL, creates, ids, careful)
			if err == nil {
				// Only the COMMIT is left: the next group may run its statements meanwhile, and
				// the two commits share the log's flush (groupcommit.Group.Staged, internal/api).
				groupcommit.Release(ctx)
			}
			return err
		})
	}
	err := run(false)
	if errors.Is(err, errCarefully) {
		err = run(true)
	}
	if errors.Is(err, errNothingToWrite) {
		return results, nil
	}
	if err != nil {
		if errors.Is(err, errKeyBusy) || errors.Is(err, errKeyLockWait) {
			return nil, errKeyBusy
		}
		return nil, mysql.Interpret("create keyed", err)
	}
	return results, nil
}

// entryExpiry is the SQL of an entry's expiry, from the database's clock and the TTL's whole
// seconds (the one ? it holds): 4 bytes, big-endian (LoadKeys writes them the same way).
const entryExpiry = "UNHEX(LPAD(HEX(CEIL(UNIX_TIMESTAMP(NOW(6)))+?),8,0))"

func (s *Store) createKeyed(ctx context.Context, tx mysql.Conn, waitUntil time.Time, ttl time.Duration, creates []exactlyonce.KeyedCreate, ids []int64, careful bool) ([]exactlyonce.KeyedResult, error) {
	// Each bucket's new entries, in the order of the creates: appended to its directory by the
	// statement that locks it, the expiry computed there from the database's clock.
	appended := map[int64][]exactlyonce.KeyedCreate{}
	var buckets []int64
	for _, c := range creates {
		b := keyBucket(c.Key)
		if appended[b] == nil {
			buckets = append(buckets, b)
		}
		appended[b] = append(appended[b], c)
	}
	slices.Sort(buckets)
	ttlSeconds := int64((ttl + time.Second - 1) / time.Second)
	lockCtx, cancel := context.WithDeadline(ctx, waitUntil)
	defer cancel()

	// The common case first: every key is fresh. One statement locks the buckets whose directories
	// hold none of the keys and appends the entries; when it changed every bucket, nothing was
	// stored and nothing needs reading. Otherwise the careful path reads the directories.
	results := make([]exactlyonce.KeyedResult, len(creates))
	stored := map[[32]byte]exactlyonce.KeyRecord{}
	fast := false
	q, args, ok := "", []any(nil), false
	if !careful {
		q, args, ok = freshStatement(buckets, appended, ttlSeconds)
	}
	if ok {
		res, err := tx.ExecContext(lockCtx, q, args...)
		if err != nil {
			return nil, lockFailed(ctx, lockCtx, waitUntil, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		switch {
		case n == int64(len(buckets)):
			fast = true
		case n > 0:
			// Some buckets took their entries, others may hold a key: start again carefully.
			return nil, errCarefully
		}
	}
	if !fast {
		var err error
		if stored, err = s.lockAndRead(ctx, lockCtx, tx, waitUntil, buckets, appended, ttlSeconds); err != nil {
			return nil, err
		}
	}
	var fresh []int
	for i, c := range creates {
		if r, ok := stored[c.Key]; ok {
			results[i] = exactlyonce.KeyedResult{Record: r}
		} else {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) == 0 {
		// Nothing to write: roll back, which takes our entries back out and releases the locks.
		return results, errNothingToWrite
	}

	if ids == nil {
		// The literal allocator: in this transaction, after the buckets' locks (the order every
		// keyed create takes them in: buckets, then the counter).
		var err error
		if ids, err = s.core.TakeIDs(ctx, tx, len(fresh)); err != nil {
			return nil, err
		}
	}
	var eventRows, keyRows []string
	var eventArgs, keyArgs []any
	var tasks []exactlyonce.NewTask
	var taskIDs []int64
	for j, i := range fresh {
		c, id := creates[i], ids[j]
		status, body := c.Answer(id)
		if c.Pending && c.Task != nil {
			// A task: stored below, in its reference's order (taskstore), after the keys' buckets.
			tasks = append(tasks, *c.Task)
			taskIDs = append(taskIDs, id)
		} else if c.Pending {
			eventRows = append(eventRows, "(?, ?, NULL, 0, NOW(6), NULL, NULL, 0)")
			eventArgs = append(eventArgs, id, routing.EventHash(id))
		} else {
			eventRows = append(eventRows, "(?, ?, ?, 10, NOW(6), NOW(6), 'api', 1)")
			eventArgs = append(eventArgs, id, routing.EventHash(id), c.Value)
		}
		keyRows = append(keyRows, keyRow)
		keyArgs = append(keyArgs, keyBucket(c.Key), c.Key[:], c.Fingerprint[:], status, body, id, ttlSeconds)
		results[i] = exactlyonce.KeyedResult{Created: true, Record: exactlyonce.KeyRecord{Fingerprint: c.Fingerprint, Status: status, Body: body, EventID: id}}
	}
	if len(eventRows) > 0 {
		if err := execDiscard(ctx, tx, strings.Replace(queries.InsertKeyedEvents, "/*rows*/", strings.Join(eventRows, ", "), 1), eventArgs...); err != nil {
			return nil, err
		}
	}
	if len(tasks) > 0 {
		if _, err := taskstore.InsertTasks(ctx, tx, tasks, taskIDs); err != nil {
			return nil, err
		}
	}
	return results, insertKeys(ctx, tx, keyRows, keyArgs)
}

// keyRow is one row of InsertKeys: the key expires at the database's clock, rounded up to a
// second, plus the TTL's seconds. Its statement runs after the one that appended the key's
// directory entry (whose expiry the same expression computed from that statement's clock), so a
// key's row never expires before its entry: the directory decides whether a key is live, and the
// pruning of expired rows never takes the row of a live entry.
const keyRow = "(?, ?, ?, ?, ?, ?, NOW(6), FROM_UNIXTIME(CEIL(UNIX_TIMESTAMP(NOW(6))) + ?))"

// lockAndRead is the careful path: it locks every bucket and appends the entries (a duplicate in
// flight elsewhere holds its bucket's lock, and we wait for its commit), reads the directories back,
// reads the stored answers of the keys they may hold, and rewrites the directories that need it.
// It returns the keys found stored.
func (s *Store) lockAndRead(ctx, lockCtx context.Context, tx mysql.Conn, waitUntil time.Time, buckets []int64,
	appended map[int64][]exactlyonce.KeyedCreate, ttlSeconds int64) (map[[32]byte]exactlyonce.KeyRecord, error) {
	q, args := lockStatement(buckets, appended, ttlSeconds)
	if _, err := tx.ExecContext(lockCtx, q, args...); err != nil {
		return nil, lockFailed(ctx, lockCtx, waitUntil, err)
	}

	// The directories as this transaction left them (what was committed, then our entries), and
	// the database's clock, which decides expiry.
	dirs, now, err := keyBuckets.ReadDirectories(ctx, tx, buckets)
	if err != nil {
		return nil, err
	}
	nowMicro := now.UnixMicro()
	committed := map[int64][]byte{} // each directory without our entries
	var maybe [][32]byte
	for _, b := range buckets {
		d, n := dirs[b], len(appended[b])*keyBuckets.Entry.Size()
		if len(d) < n {
			return nil, fmt.Errorf("idempotency_buckets: bucket %d's directory is shorter than the entries just appended to it", b)
		}
		committed[b] = d[:len(d)-n]
		// Which keys the committed directory says are stored: those are read.
		for _, c := range appended[b] {
			if keyBuckets.Entry.Find(committed[b], c.Key, nowMicro) != 0 {
				maybe = append(maybe, c.Key)
			}
		}
	}
	stored := map[[32]byte]exactlyonce.KeyRecord{}
	if len(maybe) > 0 {
		if stored, err = findKeys(ctx, tx, maybe, now); err != nil {
			return nil, err
		}
	}
	if len(stored) == len(maybe) && len(maybe) == keyCount(appended) {
		return stored, nil // every key stored: the caller rolls back, nothing to rewrite
	}
	// A directory whose oldest entry expired more than a quarter of the TTL ago is rewritten with
	// its live entries: the fast path (freshStatement) refuses such a bucket, so every bucket comes
	// here in turn, about once a quarter of the TTL, and a directory stays within about 5/4 of its
	// live keys (entries are appended in the order they expire, the TTL being one for all).
	ceilNow := now.Unix()
	if now.Nanosecond() > 0 {
		ceilNow++
	}
	stale := ceilNow - ttlSeconds/4
	return stored, compactDirectories(ctx, tx, buckets, committed, appended, stored, nowMicro, stale, dirs)
}

// compactDirectories rewrites, under the locks already held, the directories that need it: one
// whose committed part is a quarter or more expired (its live entries are kept, so a directory
// stays within 4/3 of its live keys, and a bucket's expired entries are dropped as it is written),
// and one holding an entry this transaction appended for a key that turned out to be stored (a
// repeat in a group with fresh keys). Most groups need none, and pay no statement for it.
func compactDirectories(ctx context.Context, tx mysql.Conn, buckets []int64, committed map[int64][]byte,
	appended map[int64][]exactlyonce.KeyedCreate, stored map[[32]byte]exactlyonce.KeyRecord, nowMicro, stale int64, dirs map[int64][]byte) error {
	entry := keyBuckets.Entry
	var writes []bucket.Directory
	for _, b := range buckets {
		old := committed[b]
		repeat := false
		for _, c := range appended[b] {
			_, ok := stored[c.Key]
			repeat = repeat || ok
		}
		if !repeat && (len(old) < entry.Size() || entry.FirstExpiry(old) >= stale*1_000_000) {
			continue
		}
		live := entry.Live(old, nowMicro)
		ours := dirs[b][len(old):]
		for i, c := range appended[b] {
			if _, ok := stored[c.Key]; !ok {
				live = append(live, ours[i*entry.Size():(i+1)*entry.Size()]...)
			}
		}
		writes = append(writes, bucket.Directory{Bucket: b, Entries: live})
	}
	return keyBuckets.WriteDirectories(ctx, tx, writes)
}

// findKeys reads the stored, unexpired records of keys.
func findKeys(ctx context.Context, tx mysql.Conn, keys [][32]byte, now time.Time) (map[[32]byte]exactlyonce.KeyRecord, error) {
	var buckets []int64
	hashes := make([]any, len(keys))
	for i, k := range keys {
		buckets = append(buckets, keyBucket(k))
		hashes[i] = k[:]
	}
	slices.Sort(buckets)
	buckets = slices.Compact(buckets)
	q, args := mysql.ExpandIDs(queries.FindKeys, buckets)
	q = strings.Replace(q, "/*hashes*/", mysql.Placeholders(len(keys)), 1)
	args = append(append(args, hashes...), now)
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[[32]byte]exactlyonce.KeyRecord{}
	last := map[[32]byte]time.Time{}
	for rows.Next() {
		var hash, fp []byte
		var r exactlyonce.KeyRecord
		var expires time.Time
		if err := rows.Scan(&hash, &fp, &r.Status, &r.Body, &r.EventID, &expires); err != nil {
			return nil, err
		}
		var k [32]byte
		copy(k[:], hash)
		copy(r.Fingerprint[:], fp)
		if t, ok := last[k]; !ok || expires.After(t) {
			out[k], last[k] = r, expires
		}
	}
	return out, rows.Err()
}

// lockFailed says what a failure to lock the buckets means: a wait for a key another transaction
// holds that outlasted opt.Wait (errKeyBusy), or a lock wait timeout before it, which the
// transaction helper retries (errKeyLockWait), or anything else.
func lockFailed(ctx, lockCtx context.Context, waitUntil time.Time, err error) error {
	switch {
	case ctx.Err() != nil:
	case lockCtx.Err() != nil || mysql.IsLockWaitTimeout(err) && !time.Now().Before(waitUntil):
		return errors.Join(errKeyBusy, err)
	case mysql.IsLockWaitTimeout(err):
		// innodb_lock_wait_timeout is shorter than the wait: the transaction helper runs it
		// again, and if it gives up, the key was still busy.
		return errors.Join(errKeyLockWait, err)
	}
	return err
}

// PruneKeys deletes up to limit expired idempotency keys, in batches of at most batch, and
// returns how many it deleted. The sweeper runs it after each sweep.
func (s *Store) PruneKeys(ctx context.Context, batch, limit int) (int, error) {
	total := 0
	for total < limit {
		n := min(batch, limit-total)
		res, err := s.db.ExecContext(ctx, queries.PruneKeys, n)
		if err != nil {
			return total, mysql.Interpret("prune idempotency keys", err)
		}
		got, err := res.RowsAffected()
		if err != nil {
			return total, mysql.Interpret("prune idempotency keys", err)
		}
		total += int(got)
		if got < int64(n) {
			break
		}
	}
	return total, nil
}

// execDiscard runs a statement of a keyed create's transaction whose result is not needed.
func execDiscard(ctx context.Context, tx mysql.Conn, q string, args ...any) error {
	_, err := tx.ExecContext(ctx, q, args...)
	return err
}
