package keystore_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/groupcommit"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/keystore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func keyed(scope, key string, pending bool, body string) exactlyonce.KeyedCreate {
	return exactlyonce.KeyedCreate{Key: exactlyonce.KeyHash(scope, key), Fingerprint: sha256.Sum256([]byte(body)), Pending: pending, Value: "v-" + key,
		Answer: func(id int64) (int, []byte) { return 201, fmt.Appendf(nil, `{"id":%d,"key":%q}`, id, key) }}
}

// keyOpts are the options of a create that must succeed: its Wait bounds taking a connection and
// the buckets' locks, which a database stalled by a parallel suite can take seconds to grant.
var keyOpts = exactlyonce.KeyOptions{TTL: time.Hour, Wait: 30 * time.Second}

// Invariant: a key is stored with its event and answer once; a repeat gets that record and writes
// nothing; keys of different scopes are different keys.
func TestKeyedCreateStoresOnceAndReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, alloc := range []string{mysql.AllocatorBlock, mysql.AllocatorLiteral} {
		t.Run(alloc, func(t *testing.T) {
			t.Parallel()
			store := wire.NewStores(testdb.Core(t, mysql.Config{Allocator: alloc}, 4))
			first, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "a", false, "x"), keyed("", "b", true, "x"), keyed("other", "a", false, "x")})
			require.NoError(t, err)
			for _, r := range first {
				require.True(t, r.Created)
			}
			e, err := store.Events.Get(ctx, first[0].Record.EventID)
			require.NoError(t, err)
			require.Equal(t, exactlyonce.Processed, e.State)
			require.Equal(t, "v-a", *e.Value)
			e, err = store.Events.Get(ctx, first[1].Record.EventID)
			require.NoError(t, err)
			require.Equal(t, exactlyonce.Pending, e.State)

			again, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "a", false, "y"), keyed("", "b", true, "x"), keyed("", "c", true, "x")})
			require.NoError(t, err)
			require.False(t, again[0].Created)
			require.Equal(t, first[0].Record.EventID, again[0].Record.EventID)
			require.Equal(t, first[0].Record.Body, again[0].Record.Body, "the stored answer, byte for byte")
			require.Equal(t, sha256.Sum256([]byte("x")), again[0].Record.Fingerprint, "the first request's fingerprint, for the caller to compare")
			require.False(t, again[1].Created)
			require.Equal(t, first[1].Record, again[1].Record)
			require.True(t, again[2].Created)
			n, err := store.Events.Count(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 4, n, "a, b, other's a, c: no event for a repeat")
		})
	}
}

// Invariant: however many transactions race with one key, one stores it and its event, and every
// other gets that one's record (they wait on the bucket's lock instead of failing).
func TestConcurrentKeyedCreatesStoreOneEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 32))
	var mu sync.Mutex
	var records []exactlyonce.KeyedResult
	// 32 transactions queue on one bucket's lock, each with its commit: a generous wait.
	patient := exactlyonce.KeyOptions{TTL: time.Hour, Wait: time.Minute}
	together(t, 32, func(w int) error {
		// Another key of the same scope in each transaction too, so that groups overlap.
		res, err := store.Keys.CreateKeyed(ctx, patient, []exactlyonce.KeyedCreate{keyed("", "same", false, "x"), keyed("", fmt.Sprint("own", w), true, "x")})
		if err != nil {
			return err
		}
		mu.Lock()
		records = append(records, res[0])
		mu.Unlock()
		return nil
	})
	created := 0
	for _, r := range records {
		if r.Created {
			created++
		}
		require.Equal(t, records[0].Record.Body, r.Record.Body)
	}
	require.Equal(t, 1, created)
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 33, n)
}

// Invariant: a key past its TTL is fresh again: a new event, a new answer.
func TestKeyedCreateAfterTheTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	short := exactlyonce.KeyOptions{TTL: 300 * time.Millisecond, Wait: 30 * time.Second}
	first, err := store.Keys.CreateKeyed(ctx, short, []exactlyonce.KeyedCreate{keyed("", "k", false, "x")})
	require.NoError(t, err)
	require.True(t, first[0].Created)
	expired := func() bool {
		var ok bool
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT MAX(expires_at) <= NOW(6) FROM idempotency_keys").Scan(&ok))
		return ok
	}
	require.Eventually(t, expired, 10*time.Second, 20*time.Millisecond)
	// The second key lives an hour: one of 300 ms could expire before the prune and the repeat
	// below when the database stalls for a second.
	again, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "k", false, "x")})
	require.NoError(t, err)
	require.True(t, again[0].Created, "expired: a new create")
	require.NotEqual(t, first[0].Record.EventID, again[0].Record.EventID)

	pruned, err := store.Keys.PruneKeys(ctx, 1, 10)
	require.NoError(t, err)
	require.Equal(t, 1, pruned, "the expired key is pruned, the live one kept")
	third, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "k", false, "x")})
	require.NoError(t, err)
	require.False(t, third[0].Created, "the second key is live")
	require.Equal(t, again[0].Record.EventID, third[0].Record.EventID)
}

// Invariant: a create waiting for a key another transaction holds gives up after Wait with an
// ECONFLICT error, having written nothing; once the holder commits, it gets the holder's record.
func TestKeyedCreateWaitsForTheKeyHolderThenConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	k := keyed("", "held", false, "x")
	// Hold every bucket, the key's among them, as an in-flight create holds its own.
	tx, err := store.DB.Pool().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, "SELECT bucket FROM idempotency_buckets FOR UPDATE")
	require.NoError(t, err)
	start := time.Now()
	_, err = store.Keys.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: time.Hour, Wait: 300 * time.Millisecond}, []exactlyonce.KeyedCreate{k})
	require.Error(t, err)
	require.Equal(t, exactlyonce.ECONFLICT, exactlyonce.ErrorCode(err), "%v", err)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	require.NoError(t, tx.Rollback())
	res, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{k})
	require.NoError(t, err)
	require.True(t, res[0].Created, "nothing was written by the one that gave up")
}

// A create waiting for a key another transaction holds gives up KeyWaitMargin before its request's
// deadline when that comes before Wait: on Lambda the API function's timeout (10 s, as the default
// Wait) cut the wait and the caller got a timeout where the 409 was owed.
func TestAKeyWaitEndsBeforeItsRequestsDeadline(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	tx, err := store.DB.Pool().BeginTx(context.Background(), nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.Exec("SELECT bucket FROM idempotency_buckets FOR UPDATE")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), exactlyonce.KeyWaitMargin+500*time.Millisecond)
	defer cancel()
	_, err = store.Keys.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: time.Hour, Wait: time.Minute}, []exactlyonce.KeyedCreate{keyed("", "late", false, "x")})
	require.Equal(t, exactlyonce.ECONFLICT, exactlyonce.ErrorCode(err), "%v", err)
	require.NoError(t, ctx.Err(), "answered before the request's deadline")
}

// Invariant: the keys LoadKeys stores (for the benchmark) are found as the store's own are: their
// directory entries agree with what the store writes.
func TestLoadedKeysAreFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	require.NoError(t, mysqltest.LoadKeys(ctx, store.DB.Pool(), 100, time.Hour, nil))
	loaded := exactlyonce.KeyedCreate{Key: sha256.Sum256([]byte("bench-key-42")), Value: "v",
		Answer: func(int64) (int, []byte) { return 201, []byte("new") }}
	res, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{loaded, keyed("", "fresh", false, "x")})
	require.NoError(t, err)
	require.False(t, res[0].Created, "a loaded key is stored")
	require.Equal(t, `{"id":0}`, string(res[0].Record.Body))
	require.EqualValues(t, 42, res[0].Record.EventID)
	require.True(t, res[1].Created)
}

// Invariant: a keyed create whose transaction fails part-way (here its key's INSERT, after its
// event's, in the text sent with the COMMIT) stores nothing, and leaves no transaction open on its
// connection: the next create on that one connection commits, and another session sees it.
func TestFailedKeyedCreateLeavesNoOpenTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, alloc := range []string{mysql.AllocatorBlock, mysql.AllocatorLiteral} {
		t.Run(alloc, func(t *testing.T) {
			t.Parallel()
			db, dsn := testdb.DB(t, 2)
			check, err := wire.StoresOn(db, mysql.Config{})
			require.NoError(t, err)
			one, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 1})
			require.NoError(t, err)
			t.Cleanup(func() { one.Close() })
			store, err := wire.StoresOn(one, mysql.Config{Allocator: alloc})
			require.NoError(t, err)
			tooLong := keyed("", "too-long", false, "x")
			tooLong.Answer = func(int64) (int, []byte) { return 201, make([]byte, 5000) } // the body column holds 4,096
			_, err = store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{tooLong})
			require.Error(t, err)
			n, err := check.Events.Count(ctx)
			require.NoError(t, err)
			require.Zero(t, n, "the event inserted before the failure is rolled back")
			res, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "next", false, "x")})
			require.NoError(t, err)
			require.True(t, res[0].Created)
			n, err = check.Events.Count(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "the next create on the same connection committed")
		})
	}
}

// keysInBucket returns n keys of scope "" whose bucket is b, and the bucket of "seed" when b < 0.
func keysInBucket(t *testing.T, b int64, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 10_000_000; i++ {
		k := fmt.Sprint("k", i)
		h := exactlyonce.KeyHash("", k)
		if int64(binary.BigEndian.Uint32(h[:4])%keystore.KeyBuckets) == b {
			out = append(out, k)
		}
	}
	require.Len(t, out, n)
	return out
}

func bucketOf(key string) int64 {
	h := exactlyonce.KeyHash("", key)
	return int64(binary.BigEndian.Uint32(h[:4]) % keystore.KeyBuckets)
}

// Invariant: a create waits only for its own buckets. Another transaction holding a bucket of the
// same partition (256 partitions of 16 buckets: b and b+256 share one), as a create of another key
// in flight does, does not hold it up.
func TestKeyedCreateDoesNotWaitForAPartitionNeighbour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	mine := bucketOf("mine")
	neighbour := (mine + 256) % keystore.KeyBuckets
	tx, err := store.DB.Pool().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, "UPDATE idempotency_buckets SET directory = directory WHERE bucket = ?", neighbour)
	require.NoError(t, err)
	// Held up, it would wait until the test ends: the wait only bounds how long a database stalled
	// by a parallel suite may take.
	res, err := store.Keys.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: time.Hour, Wait: 10 * time.Second}, []exactlyonce.KeyedCreate{keyed("", "mine", false, "x")})
	require.NoError(t, err, "a create of another bucket of the partition held it up")
	require.True(t, res[0].Created)
}

// directory reads bucket b's directory.
func directory(t *testing.T, store *wire.Stores, b int64) []byte {
	t.Helper()
	var d []byte
	require.NoError(t, store.DB.Pool().QueryRowContext(context.Background(), "SELECT directory FROM idempotency_buckets WHERE bucket = ?", b).Scan(&d))
	return d
}

// Invariant: a bucket's directory holds one entry per stored key, which expires no later than its
// key's row: a repeat in a group with fresh keys adds none, a group of repeats none, and a
// directory whose oldest entry expired more than a quarter of the TTL ago is rewritten with its
// live entries when its bucket is next written.
func TestKeyDirectoriesHoldOneEntryPerStoredKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	keys := keysInBucket(t, bucketOf("seed"), 6)
	b := bucketOf("seed")
	short := exactlyonce.KeyOptions{TTL: time.Second, Wait: 30 * time.Second}

	first, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", keys[0], false, "x")})
	require.NoError(t, err)
	require.True(t, first[0].Created)
	d := directory(t, store, b)
	require.Len(t, d, 8)
	var exp time.Time
	require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT expires_at FROM idempotency_keys").Scan(&exp))
	entry := int64(binary.BigEndian.Uint32(d[4:8]))
	require.GreaterOrEqual(t, exp.Unix(), entry, "a key's row never expires before its entry")
	require.LessOrEqual(t, exp.Unix(), entry+2, "nor long after it")
	require.Zero(t, exp.Nanosecond())

	// A repeat with a fresh key of the same bucket: one more entry, not two.
	mixed, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", keys[0], false, "x"), keyed("", keys[1], false, "x")})
	require.NoError(t, err)
	require.False(t, mixed[0].Created)
	require.True(t, mixed[1].Created)
	require.Len(t, directory(t, store, b), 16)
	// Repeats only: nothing written.
	_, err = store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", keys[1], false, "x"), keyed("", keys[0], false, "x")})
	require.NoError(t, err)
	require.Len(t, directory(t, store, b), 16)

	// Another bucket, two short-lived keys, the oldest entries: once they have expired, the next
	// write of the bucket rewrites its directory with what is live (nothing) and adds its own.
	other := keysInBucket(t, (b+1)%keystore.KeyBuckets, 3)
	_, err = store.Keys.CreateKeyed(ctx, short, []exactlyonce.KeyedCreate{keyed("", other[0], false, "x"), keyed("", other[1], false, "x")})
	require.NoError(t, err)
	require.Len(t, directory(t, store, (b+1)%keystore.KeyBuckets), 16)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency_keys WHERE expires_at <= NOW(6)").Scan(&n))
		return n == 2
	}, 10*time.Second, 20*time.Millisecond)
	// Stale is more than a quarter of the writer's TTL (here under a second) past expiry.
	_, err = store.Keys.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: 3 * time.Second, Wait: 30 * time.Second}, []exactlyonce.KeyedCreate{keyed("", other[2], false, "x")})
	require.NoError(t, err)
	kept := directory(t, store, (b+1)%keystore.KeyBuckets)
	require.Len(t, kept, 8, "the expired entries were dropped")
	// The entry kept is other[2]'s (its hash's bytes 8-11), read from the directory: a repeat of it
	// would find it stored only within its 3 s, which a stalled database can outlast.
	k2 := keyed("", other[2], false, "x").Key
	require.Equal(t, k2[8:12], kept[:4], "the entry kept is the one just written")
	for _, k := range []string{keys[0], keys[1]} {
		again, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", k, false, "x")})
		require.NoError(t, err)
		require.False(t, again[0].Created, "%s is still stored", k)
	}
	again, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", other[0], false, "x")})
	require.NoError(t, err)
	require.True(t, again[0].Created, "an expired key is fresh again")
	// Stored again while its old row may linger: a replay gets the new answer.
	replay, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", other[0], false, "x")})
	require.NoError(t, err)
	require.False(t, replay[0].Created)
	require.Equal(t, again[0].Record.EventID, replay[0].Record.EventID, "the row that expires last answers")
}

// Invariant: every entry a group appends to a directory is its key's 4 bytes and the group's one
// expiry, by either path, however many of the group's keys share a bucket: three keys of one
// bucket and one of another, fresh (FreshKeyBuckets), then one more of the first bucket beside a
// repeat (the careful path, LockKeyBuckets), each found stored afterwards.
func TestKeyEntriesOfOneGroupShareItsExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	b := bucketOf("shared")
	keys := keysInBucket(t, b, 4)
	lone := keysInBucket(t, (b+7)%keystore.KeyBuckets, 1)[0]
	name := func(k string) []byte { h := exactlyonce.KeyHash("", k); return h[8:12] }
	check := func(d []byte, want []string) {
		t.Helper()
		require.Len(t, d, 8*len(want))
		for i, k := range want {
			require.Equal(t, name(k), d[8*i:8*i+4], "entry %d is %s's", i, k)
			require.Equal(t, d[4:8], d[8*i+4:8*i+8], "entry %d has the group's expiry", i)
		}
		var exp time.Time
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT MAX(expires_at) FROM idempotency_keys WHERE bucket = ?", b).Scan(&exp))
		entry := int64(binary.BigEndian.Uint32(d[len(d)-4:]))
		require.GreaterOrEqual(t, exp.Unix(), entry, "a key's row never expires before its entry")
		require.LessOrEqual(t, exp.Unix(), entry+2, "nor long after it")
	}

	first, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", keys[0], false, "x"),
		keyed("", lone, false, "x"), keyed("", keys[1], true, "x"), keyed("", keys[2], false, "x")})
	require.NoError(t, err)
	for _, r := range first {
		require.True(t, r.Created)
	}
	check(directory(t, store, b), keys[:3])
	d := directory(t, store, (b+7)%keystore.KeyBuckets)
	require.Equal(t, name(lone), d[:4])
	require.Len(t, d, 8)

	// A repeat beside a fresh key of the bucket: the careful path, which appends the same way
	// and then takes the repeat's entry out again.
	mixed, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", keys[3], false, "x"), keyed("", keys[0], false, "x")})
	require.NoError(t, err)
	require.True(t, mixed[0].Created)
	require.False(t, mixed[1].Created)
	require.Equal(t, first[0].Record.EventID, mixed[1].Record.EventID)
	d = directory(t, store, b)
	require.Len(t, d, 32)
	require.Equal(t, name(keys[3]), d[24:28])
	for _, k := range append(keys, lone) {
		again, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", k, false, "x")})
		require.NoError(t, err)
		require.False(t, again[0].Created, "%s is stored", k)
	}
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "one event per key")
}

// A keyed group lets the next one start (groupcommit.Release) once only its COMMIT is left, so that
// a process's groups overlap in their commits: here a second group runs, and stores its key, while
// the first group's Run has not returned; both keys are stored once, each with its event.
func TestKeyedGroupLetsTheNextStartBeforeItsCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	first, second := keyed("", "first", false, "x"), keyed("", "second", false, "x")
	firstIn, secondRan := make(chan struct{}), make(chan struct{})
	g := &groupcommit.Group[exactlyonce.KeyedCreate, exactlyonce.KeyedResult]{Staged: true, Flushers: 2,
		Run: func(ctx context.Context, batch []exactlyonce.KeyedCreate) ([]exactlyonce.KeyedResult, error) {
			if batch[0].Key == first.Key {
				close(firstIn)
			}
			res, err := store.Keys.CreateKeyed(ctx, keyOpts, batch)
			if batch[0].Key == first.Key {
				select {
				case <-secondRan:
				case <-time.After(30 * time.Second):
					t.Error("the second group did not run while the first's had not returned: CreateKeyed never released it")
				}
			} else {
				close(secondRan)
			}
			return res, err
		}}
	results := make(chan exactlyonce.KeyedResult, 2)
	var wg sync.WaitGroup
	for _, c := range []exactlyonce.KeyedCreate{first, second} {
		wg.Go(func() {
			r, err := g.Do(ctx, c)
			require.NoError(t, err)
			results <- r
		})
		if c.Key == first.Key {
			<-firstIn // the second request comes while the first group runs
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		require.True(t, r.Created)
	}
	n, err := store.Events.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	again, err := store.Keys.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{first, second})
	require.NoError(t, err)
	require.False(t, again[0].Created || again[1].Created, "both keys stored")
}
