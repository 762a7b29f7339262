package bucket_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql/bucket"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/stretchr/testify/require"
)

// The layouts of the two stores: the keys' (4 bytes of hash, Unix seconds in 4) and the counters'
// (8 bytes of hash, Unix microseconds in 8).
var (
	keys     = bucket.Layout{HashFrom: 8, HashLen: 4, ExpiryLen: 4, Unit: time.Second}
	counters = bucket.Layout{HashFrom: 8, HashLen: 8, ExpiryLen: 8, Unit: time.Microsecond}
)

func hash(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// A directory finds a name's unexpired entry, skips its expired ones, keeps its live entries in
// order, and replaces a name's entries by one at the end, in both layouts.
func TestDirectoriesFindLiveAndSet(t *testing.T) {
	t.Parallel()
	const now int64 = 1_000_000 // Unix seconds
	for name, l := range map[string]bucket.Layout{"keys": keys, "counters": counters} {
		unit := int64(1)
		if l.Unit == time.Second {
			unit = 1_000_000
		}
		exp := func(sec int64) int64 { return sec * 1_000_000 / unit } // in the layout's units
		a, b, c := hash("a"), hash("b"), hash("c")
		var dir []byte
		dir = l.Set(dir, a, exp(now-10)) // expired
		dir = l.Set(dir, b, exp(now+10))
		require.Len(t, dir, 2*l.Size(), name)
		require.Zero(t, l.Find(dir, a, now*1_000_000), "%s: an expired entry is not found", name)
		require.Equal(t, (now+10)*1_000_000, l.Find(dir, b, now*1_000_000), name)
		require.Zero(t, l.Find(dir, c, now*1_000_000), name)
		require.Equal(t, (now-10)*1_000_000, l.FirstExpiry(dir), name)
		require.Zero(t, l.FirstExpiry(nil), name)

		live := l.Live(dir, now*1_000_000)
		require.Equal(t, dir[l.Size():], live, "%s: only b's entry is live", name)
		live[0] ^= 0xff
		require.NotEqual(t, dir[l.Size():], live, "%s: Live returns a copy", name)

		// a again: its expired entry goes, its new one is last; b's stays first.
		dir = l.Set(dir, a, exp(now+20))
		require.Len(t, dir, 2*l.Size(), name)
		require.Equal(t, l.Name(b), dir[:l.HashLen], name)
		require.Equal(t, (now+20)*1_000_000, l.Find(dir, a, now*1_000_000), name)
		require.Equal(t, (now+20)*1_000_000, l.Find(l.Live(dir, (now+15)*1_000_000), a, (now+15)*1_000_000), name)
		require.Len(t, l.Live(dir, (now+15)*1_000_000), l.Size(), "%s: b's entry expired at now+10", name)
	}
	// The bucket is the first four bytes of the hash, big-endian, modulo the buckets.
	tab := &bucket.Table{Buckets: 4096}
	h := hash("x")
	require.Equal(t, (int64(h[0])<<24|int64(h[1])<<16|int64(h[2])<<8|int64(h[3]))%4096, tab.Of(h))
	require.Equal(t, []int64{1, 3, 7}, bucket.Sorted([]int64{7, 1, 3, 7, 1}))
}

// The counter service's tables (migrations/0008), with statements of the shape its store's
// (counterstore/counters.sql): the test's own, as this package holds none.
func counterTable() *bucket.Table {
	return &bucket.Table{Name: "counter_buckets (test)", Buckets: 8192, Entry: counters,
		Lock:  "UPDATE counter_buckets SET version = version + 1 WHERE bucket IN (/*ids*/)",
		Read:  "SELECT bucket, directory, NOW(6) FROM counter_directories WHERE bucket IN (/*ids*/)",
		Write: "UPDATE counter_directories SET directory = CASE bucket /*cases*/ END WHERE bucket IN (/*ids*/)"}
}

// counting is a transaction that counts the statements it runs, and the largest.
type counting struct {
	*sql.Tx
	n, largest int
}

func (c *counting) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	c.n++
	size := len(q)
	for _, a := range args {
		if b, ok := a.([]byte); ok {
			size += len(b)
		}
	}
	c.largest = max(c.largest, size)
	return c.Tx.ExecContext(ctx, q, args...)
}

// Directories are written in statements of at most MaxWriteBytes of directories (a larger one
// alone), read back as written, with the database's clock; a bucket with no row fails the read and
// the lock, naming the table.
func TestDirectoriesAreWrittenInStatementsBoundedByBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdb.DB(t, 2)
	tab := counterTable()
	// 10 directories of 3 KB (4 fit in 12 KB), then one of 20 KB (alone), then 2 of 1 byte.
	var dirs []bucket.Directory
	var ids []int64
	for i := range 13 {
		size := 3 << 10
		switch {
		case i == 10:
			size = 20 << 10
		case i > 10:
			size = 1
		}
		dirs = append(dirs, bucket.Directory{Bucket: int64(100 + i), Entries: bytes.Repeat([]byte{byte(i)}, size)})
		ids = append(ids, int64(100+i))
	}
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	c := &counting{Tx: tx}
	require.NoError(t, tab.LockBuckets(ctx, c, ids))
	c.n = 0
	require.NoError(t, tab.WriteDirectories(ctx, c, dirs))
	// {0-3}, {4-7}, {8, 9}, {10}, {11, 12}.
	require.Equal(t, 5, c.n, "statements")
	require.Less(t, c.largest, 21<<10)
	before := time.Now()
	got, now, err := tab.ReadDirectories(ctx, c, ids)
	require.NoError(t, err)
	require.WithinDuration(t, before, now, time.Minute, "the database's clock")
	for _, d := range dirs {
		require.Equal(t, d.Entries, got[d.Bucket], "bucket %d", d.Bucket)
	}

	_, _, err = tab.ReadDirectories(ctx, c, []int64{1, 8192})
	require.ErrorContains(t, err, "counter_buckets (test): found 1 of 2 buckets: rows are missing")
	err = tab.LockBuckets(ctx, c, []int64{1, 8192})
	require.ErrorContains(t, err, "counter_buckets (test): locked 1 of 2 buckets: rows are missing")
}

// A bucket's lock is held to the commit: a second transaction locking it (among others) waits for
// the first to commit, and then reads the directory the first wrote.
func TestABucketsLockMakesTheNextWriterReadWhatTheFirstCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testdb.DB(t, 4)
	tab := counterTable()
	// The second, on a connection whose id the test knows.
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close() // after the first's rollback, which ends the second's wait
	var id int64
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id))
	first, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer first.Rollback()
	require.NoError(t, tab.LockBuckets(ctx, first, []int64{7}))

	var locked atomic.Bool
	read := make(chan []byte, 1)
	go func() {
		second, err := conn.BeginTx(ctx, nil)
		if err != nil {
			read <- []byte(err.Error())
			return
		}
		defer second.Rollback()
		if err := tab.LockBuckets(ctx, second, []int64{3, 7, 9}); err != nil {
			read <- []byte(err.Error())
			return
		}
		locked.Store(true)
		dirs, _, err := tab.ReadDirectories(ctx, second, []int64{3, 7, 9})
		if err != nil {
			read <- []byte(err.Error())
			return
		}
		read <- dirs[7]
	}()
	// The second waits on the lock: InnoDB shows its transaction in LOCK WAIT.
	var early []byte
	testutil.Eventually(t, 10*time.Second, "the second transaction waits for the bucket", func() bool {
		select {
		case early = <-read:
			return true // it did not wait: failed below
		default:
		}
		waits, err := mysqltest.WaitsForALock(ctx, db, id)
		require.NoError(t, err)
		return waits
	})
	require.Nil(t, early, "the second transaction ended without waiting: %q", early)
	require.False(t, locked.Load(), "the second locked a bucket the first holds")
	entry := counters.Set(nil, hash("e"), 1<<62)
	require.NoError(t, tab.WriteDirectories(ctx, first, []bucket.Directory{{Bucket: 7, Entries: entry}}))
	require.NoError(t, first.Commit())
	select {
	case got := <-read:
		require.Equal(t, entry, got, "the second read what the first committed")
	case <-time.After(30 * time.Second):
		t.Fatal("the second never got the lock")
	}
}
