// Package counterstore is the counter service's store (counters.sql, migrations/0008_counters.sql):
// a batch of counter messages applied in one transaction, under the buckets' locks, against the
// entities' directories and the users' sums, with the batch's notifications recorded in it; and
// what the sweeper and the API read of it (the unpublished notifications, the reconciliation of a
// sample of counts, the pruning, a user's counts).
package counterstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/bucket"
)

// queryTexts are the statements of counters.sql.
type queryTexts struct {
	LockCounterBuckets, ReadCounterBuckets, ReadCounterSums, InsertCounterSums, UpdateCounterSums, InsertCounterFacts, WriteCounterDirectories, InsertCounterNotifications, MarkCounterNotificationsPublished, UnpublishedCounterNotifications, PruneCounterNotifications, FirstOldReadCounterEntity, OldReadCounterEntities, DeleteCounterEntities, ReconcileCounterSums, CounterSumsOfUser, CounterSumOf string
}

//go:generate go run github.com/exactlyonce/exactlyonce/internal/mysql/querygen queries=queryTexts:counters.sql

// Store is the counter service's: it applies counter messages, records and publishes their
// notifications, and reads, reconciles and prunes what they wrote. Safe for concurrent use; build
// one per process, on the process's core handle.
type Store struct {
	core *mysql.DB
	db   *sql.DB
}

// New returns the Store on db.
func New(db *mysql.DB) *Store { return &Store{core: db, db: db.Pool()} }

// CounterBuckets is the number of counter buckets: rows of counter_buckets created by migration
// 0008, each a lock and a directory of entities (counters.sql). A user's bucket is computed
// from the SHA-256 of the user id (exactlyonce.UserHash), an entity's from its hash
// (CounterMessage.EntityHash), in Go, and stored with their rows.
const CounterBuckets = 8192

// bucketTable is the counter buckets' lock and directories (internal/mysql/bucket): a directory entry
// is 8 bytes of an entity's hash and the Unix microseconds it is remembered until. The idempotency
// keys' directories have the same shape (a key's hash, its expiry).
var bucketTable = &bucket.Table{Name: "counter_buckets and counter_directories (migration 0008)", Buckets: CounterBuckets,
	Entry: bucket.Layout{HashFrom: 8, HashLen: 8, ExpiryLen: 8, Unit: time.Microsecond},
	Lock:  queries.LockCounterBuckets, Read: queries.ReadCounterBuckets, Write: queries.WriteCounterDirectories}

// CounterReadRetention is how long a read entity is remembered, so that a duplicate or late
// "added" does not count it again: longer than the 14 days a queue keeps a message at most. Its
// facts are pruned by the sweeper after that, and its directory entry expires.
const CounterReadRetention = 15 * 24 * time.Hour

// EntityBucket is the bucket of an entity with hash hash (CounterMessage.EntityHash): its
// directory's.
func EntityBucket(hash [32]byte) int64 { return bucketTable.Of(hash) }

// UserBucket is the bucket of a user's counts.
func UserBucket(userID string) int64 { return EntityBucket(exactlyonce.UserHash(userID)) }

// counterEntryForever is the expiry of a counted entity's directory entry: it is never forgotten
// while it is counted.
const counterEntryForever = math.MaxInt64

// ApplyCounterMessages applies a batch of counter messages, in their order, in one transaction,
// and returns one notification per message, in the same order: each message's effect on its
// count (applied or not) and the count after it. The notifications are recorded, unpublished, in
// the same transaction; the caller publishes them and then marks them (MarkCounterPublished).
//
// A message for an entity already counted ("added") or not counted ("readed") changes nothing. A
// read entity is remembered for CounterReadRetention, so that a duplicate or late "added" after
// it does not count it again, and a "readed" before its "added" keeps the "added" from counting.
func (s *Store) ApplyCounterMessages(ctx context.Context, msgs []exactlyonce.CounterMessage) ([]exactlyonce.CounterResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	var results []exactlyonce.CounterResult
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		results, err = applyCounterMessages(ctx, tx, msgs)
		return err
	})
	if err != nil {
		return nil, mysql.Interpret("apply counter messages", err)
	}
	return results, nil
}

// counterDirs is the directories of a batch's entity buckets, as read and as changed in memory.
type counterDirs struct {
	dirs    map[int64][]byte
	changed map[int64]bool
	now     int64 // the database's clock, Unix microseconds
}

// lookup returns the expiry of an entity's unexpired entry, or 0 if it has none.
func (d *counterDirs) lookup(hash [32]byte) int64 {
	return bucketTable.Entry.Find(d.dirs[EntityBucket(hash)], hash, d.now)
}

// set gives an entity the entry expiring at exp, replacing any it had.
func (d *counterDirs) set(hash [32]byte, exp int64) {
	b := EntityBucket(hash)
	d.dirs[b] = bucketTable.Entry.Set(d.dirs[b], hash, exp)
	d.changed[b] = true
}

// counterFact is a row of t_counter to insert.
type counterFact struct {
	kind int
	hash [32]byte
	m    exactlyonce.CounterMessage
}

const (
	factAdded = 1
	factRead  = 2
)

func applyCounterMessages(ctx context.Context, tx *sql.Tx, msgs []exactlyonce.CounterMessage) ([]exactlyonce.CounterResult, error) {
	hashes := make([][32]byte, len(msgs))
	var buckets, userBuckets []int64
	var keys []exactlyonce.CounterKey
	seenKey := map[exactlyonce.CounterKey]bool{}
	for i, m := range msgs {
		hashes[i] = m.EntityHash()
		buckets = append(buckets, EntityBucket(hashes[i]), UserBucket(m.UserID))
		if k := m.Key(); !seenKey[k] {
			seenKey[k] = true
			keys = append(keys, k)
			userBuckets = append(userBuckets, UserBucket(m.UserID))
		}
	}
	buckets = bucket.Sorted(buckets)
	userBuckets = bucket.Sorted(userBuckets)

	// The buckets' locks: a concurrent message for one of these users or entities holds one, and
	// we wait for its commit. Then the directories, and the database's clock.
	if err := bucketTable.LockBuckets(ctx, tx, buckets); err != nil {
		return nil, err
	}
	read, now, err := bucketTable.ReadDirectories(ctx, tx, buckets)
	if err != nil {
		return nil, err
	}
	dirs := &counterDirs{dirs: read, changed: map[int64]bool{}, now: now.UnixMicro()}

	// The batch's counts, and only those.
	q, args := mysql.ExpandIDs(queries.ReadCounterSums, userBuckets)
	q = strings.Replace(q, "/*keys*/", strings.TrimSuffix(strings.Repeat("(?, ?), ", len(keys)), ", "), 1)
	for _, k := range keys {
		args = append(args, k.UserID, k.EntityType)
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	sums := map[exactlyonce.CounterKey]*exactlyonce.CounterSum{}
	stored := map[exactlyonce.CounterKey]bool{}
	for rows.Next() {
		var k exactlyonce.CounterKey
		var v exactlyonce.CounterSum
		if err := rows.Scan(&k.EntityType, &k.UserID, &v.Sum, &v.Version); err != nil {
			rows.Close()
			return nil, err
		}
		sums[k], stored[k] = &v, true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// The messages, in order, against the directories and the sums as they change.
	readUntil := now.Add(CounterReadRetention).UnixMicro()
	results := make([]exactlyonce.CounterResult, len(msgs))
	var facts []counterFact
	var changedKeys []exactlyonce.CounterKey
	changed := map[exactlyonce.CounterKey]bool{}
	for i, m := range msgs {
		k := m.Key()
		sum := sums[k]
		if sum == nil {
			sum = &exactlyonce.CounterSum{}
			sums[k] = sum
		}
		exp := dirs.lookup(hashes[i])
		applied := false
		switch {
		case m.Action == exactlyonce.CounterAdded && exp == 0:
			// New: counted from now on.
			dirs.set(hashes[i], counterEntryForever)
			facts = append(facts, counterFact{factAdded, hashes[i], m})
			sum.Sum++
			applied = true
		case m.Action == exactlyonce.CounterRead && exp == counterEntryForever:
			// Counted: not any more, and remembered as read.
			dirs.set(hashes[i], readUntil)
			facts = append(facts, counterFact{factRead, hashes[i], m})
			sum.Sum--
			applied = true
		case m.Action == exactlyonce.CounterRead && exp == 0:
			// Read before its "added" arrived: nothing to uncount, but remembered, so that the
			// "added" does not count it.
			dirs.set(hashes[i], readUntil)
			facts = append(facts, counterFact{factRead, hashes[i], m})
		}
		// Otherwise a duplicate ("added" of a counted or read entity, "readed" of a read one):
		// nothing changes.
		if applied {
			sum.Version++
			if !changed[k] {
				changed[k] = true
				changedKeys = append(changedKeys, k)
			}
		}
		results[i] = exactlyonce.CounterResult{ID: newNotificationID(), EntityID: m.EntityID, EntityType: m.EntityType,
			UserID: m.UserID, Action: m.Action, Applied: applied, Sum: sum.Sum, Version: sum.Version}
	}

	if len(facts) > 0 {
		var rows []string
		var args []any
		for _, f := range facts {
			rows = append(rows, "(?, ?, ?, ?, ?, ?, NOW(6))")
			args = append(args, UserBucket(f.m.UserID), f.kind, f.hash[:], f.m.EntityType, f.m.UserID, f.m.EntityID)
		}
		if _, err := tx.ExecContext(ctx, strings.Replace(queries.InsertCounterFacts, "/*rows*/", strings.Join(rows, ", "), 1), args...); err != nil {
			return nil, err
		}
	}
	if err := writeCounterSums(ctx, tx, changedKeys, sums, stored); err != nil {
		return nil, err
	}
	if err := writeCounterDirectories(ctx, tx, dirs); err != nil {
		return nil, err
	}
	var nrows []string
	var nargs []any
	for _, r := range results {
		body, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		id, _ := hex.DecodeString(r.ID)
		nrows = append(nrows, "(?, 0, ?, NOW(6))")
		nargs = append(nargs, id, body)
	}
	if _, err := tx.ExecContext(ctx, strings.Replace(queries.InsertCounterNotifications, "/*rows*/", strings.Join(nrows, ", "), 1), nargs...); err != nil {
		return nil, err
	}
	return results, nil
}

func writeCounterSums(ctx context.Context, tx *sql.Tx, keys []exactlyonce.CounterKey, sums map[exactlyonce.CounterKey]*exactlyonce.CounterSum, stored map[exactlyonce.CounterKey]bool) error {
	var insRows []string
	var insArgs []any
	var sumCases, versionCases, keyRows []string
	var sumArgs, versionArgs, keyArgs []any
	var buckets []int64
	for _, k := range keys {
		v := sums[k]
		if !stored[k] {
			insRows = append(insRows, "(?, ?, ?, ?, ?, NOW(6))")
			insArgs = append(insArgs, UserBucket(k.UserID), k.EntityType, k.UserID, v.Sum, v.Version)
			continue
		}
		sumCases = append(sumCases, "WHEN CAST(user_id AS BINARY) = ? AND CAST(entity_type AS BINARY) = ? THEN ?")
		sumArgs = append(sumArgs, k.UserID, k.EntityType, v.Sum)
		versionCases = append(versionCases, "WHEN CAST(user_id AS BINARY) = ? AND CAST(entity_type AS BINARY) = ? THEN ?")
		versionArgs = append(versionArgs, k.UserID, k.EntityType, v.Version)
		keyRows = append(keyRows, "(?, ?)")
		keyArgs = append(keyArgs, k.UserID, k.EntityType)
		buckets = append(buckets, UserBucket(k.UserID))
	}
	if len(insRows) > 0 {
		if _, err := tx.ExecContext(ctx, strings.Replace(queries.InsertCounterSums, "/*rows*/", strings.Join(insRows, ", "), 1), insArgs...); err != nil {
			return err
		}
	}
	if len(keyRows) > 0 {
		slices.Sort(buckets)
		buckets = slices.Compact(buckets)
		q := queries.UpdateCounterSums
		q = strings.Replace(q, "/*sums*/", strings.Join(sumCases, " "), 1)
		q = strings.Replace(q, "/*versions*/", strings.Join(versionCases, " "), 1)
		q, ids := mysql.ExpandIDs(q, buckets)
		q = strings.Replace(q, "/*keys*/", strings.Join(keyRows, ", "), 1)
		args := append(append(append(sumArgs, versionArgs...), ids...), keyArgs...)
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != int64(len(keyRows)) {
			return fmt.Errorf("t_counter_sum: updated %d of %d counts read under their locks", n, len(keyRows))
		}
	}
	return nil
}

// writeCounterDirectories writes the directory of each entity bucket that changed: its
// remembered entries (read ones past the retention are dropped) and the new ones, a few buckets
// per statement (bucket.Table.WriteDirectories).
func writeCounterDirectories(ctx context.Context, tx *sql.Tx, d *counterDirs) error {
	var changed []int64
	for b := range d.changed {
		changed = append(changed, b)
	}
	slices.Sort(changed)
	dirs := make([]bucket.Directory, len(changed))
	for i, b := range changed {
		dirs[i] = bucket.Directory{Bucket: b, Entries: bucketTable.Entry.Live(d.dirs[b], d.now)}
	}
	return bucketTable.WriteDirectories(ctx, tx, dirs)
}

func newNotificationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
