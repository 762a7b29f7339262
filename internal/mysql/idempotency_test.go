package mysql_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

func keyed(scope, key string, pending bool, body string) exactlyonce.KeyedCreate {
	return exactlyonce.KeyedCreate{Key: exactlyonce.KeyHash(scope, key), Fingerprint: sha256.Sum256([]byte(body)), Pending: pending, Value: "v-" + key,
		Answer: func(id int64) (int, []byte) { return 201, fmt.Appendf(nil, `{"id":%d,"key":%q}`, id, key) }}
}

var keyOpts = exactlyonce.KeyOptions{TTL: time.Hour, Wait: 5 * time.Second}

// Invariant: a key is stored with its event and answer once; a repeat gets that record and writes
// nothing; keys of different scopes are different keys.
func TestKeyedCreateStoresOnceAndReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, alloc := range []string{mysql.AllocatorBlock, mysql.AllocatorLiteral} {
		t.Run(alloc, func(t *testing.T) {
			t.Parallel()
			store := testdb.Store(t, mysql.StoreConfig{Allocator: alloc}, 4)
			first, err := store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "a", false, "x"), keyed("", "b", true, "x"), keyed("other", "a", false, "x")})
			require.NoError(t, err)
			for _, r := range first {
				require.True(t, r.Created)
			}
			e, err := store.Get(ctx, first[0].Record.EventID)
			require.NoError(t, err)
			require.Equal(t, exactlyonce.Processed, e.State)
			require.Equal(t, "v-a", *e.Value)
			e, err = store.Get(ctx, first[1].Record.EventID)
			require.NoError(t, err)
			require.Equal(t, exactlyonce.Pending, e.State)

			again, err := store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "a", false, "y"), keyed("", "b", true, "x"), keyed("", "c", true, "x")})
			require.NoError(t, err)
			require.False(t, again[0].Created)
			require.Equal(t, first[0].Record.EventID, again[0].Record.EventID)
			require.Equal(t, first[0].Record.Body, again[0].Record.Body, "the stored answer, byte for byte")
			require.Equal(t, sha256.Sum256([]byte("x")), again[0].Record.Fingerprint, "the first request's fingerprint, for the caller to compare")
			require.False(t, again[1].Created)
			require.Equal(t, first[1].Record, again[1].Record)
			require.True(t, again[2].Created)
			n, err := store.Count(ctx)
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
	store := testdb.Store(t, mysql.StoreConfig{}, 32)
	var mu sync.Mutex
	var records []exactlyonce.KeyedResult
	// 32 transactions queue on one bucket's lock, each with its commit: a generous wait.
	patient := exactlyonce.KeyOptions{TTL: time.Hour, Wait: time.Minute}
	together(t, 32, func(w int) error {
		// Another key of the same scope in each transaction too, so that groups overlap.
		res, err := store.CreateKeyed(ctx, patient, []exactlyonce.KeyedCreate{keyed("", "same", false, "x"), keyed("", fmt.Sprint("own", w), true, "x")})
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
	n, err := store.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 33, n)
}

// Invariant: a key past its TTL is fresh again: a new event, a new answer.
func TestKeyedCreateAfterTheTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	short := exactlyonce.KeyOptions{TTL: 300 * time.Millisecond, Wait: time.Second}
	first, err := store.CreateKeyed(ctx, short, []exactlyonce.KeyedCreate{keyed("", "k", false, "x")})
	require.NoError(t, err)
	require.True(t, first[0].Created)
	expired := func() bool {
		var ok bool
		require.NoError(t, store.DB().QueryRowContext(ctx, "SELECT MAX(expires_at) <= NOW(6) FROM idempotency_keys").Scan(&ok))
		return ok
	}
	require.Eventually(t, expired, 10*time.Second, 20*time.Millisecond)
	again, err := store.CreateKeyed(ctx, short, []exactlyonce.KeyedCreate{keyed("", "k", false, "x")})
	require.NoError(t, err)
	require.True(t, again[0].Created, "expired: a new create")
	require.NotEqual(t, first[0].Record.EventID, again[0].Record.EventID)

	pruned, err := store.PruneKeys(ctx, 1, 10)
	require.NoError(t, err)
	require.Equal(t, 1, pruned, "the expired key is pruned, the live one kept")
	third, err := store.CreateKeyed(ctx, short, []exactlyonce.KeyedCreate{keyed("", "k", false, "x")})
	require.NoError(t, err)
	require.False(t, third[0].Created, "the second key is live")
	require.Equal(t, again[0].Record.EventID, third[0].Record.EventID)
}

// Invariant: a create waiting for a key another transaction holds gives up after Wait with an
// ECONFLICT error, having written nothing; once the holder commits, it gets the holder's record.
func TestKeyedCreateWaitsForTheKeyHolderThenConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	k := keyed("", "held", false, "x")
	// Hold every bucket, the key's among them, as an in-flight create holds its own.
	tx, err := store.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, "SELECT bucket FROM idempotency_buckets FOR UPDATE")
	require.NoError(t, err)
	start := time.Now()
	_, err = store.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: time.Hour, Wait: 300 * time.Millisecond}, []exactlyonce.KeyedCreate{k})
	require.Error(t, err)
	require.Equal(t, exactlyonce.ECONFLICT, exactlyonce.ErrorCode(err), "%v", err)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	require.NoError(t, tx.Rollback())
	res, err := store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{k})
	require.NoError(t, err)
	require.True(t, res[0].Created, "nothing was written by the one that gave up")
}

// Invariant: the keys LoadKeys stores (for the benchmark) are found as the store's own are: their
// directory entries agree with what the store writes.
func TestLoadedKeysAreFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	require.NoError(t, mysql.LoadKeys(ctx, store.DB(), 100, time.Hour, nil))
	loaded := exactlyonce.KeyedCreate{Key: sha256.Sum256([]byte("bench-key-42")), Value: "v",
		Answer: func(int64) (int, []byte) { return 201, []byte("new") }}
	res, err := store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{loaded, keyed("", "fresh", false, "x")})
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
			check, err := mysql.NewStore(db, mysql.StoreConfig{})
			require.NoError(t, err)
			one, err := mysql.Open(mysql.ConnConfig{DSN: dsn, MaxOpenConns: 1})
			require.NoError(t, err)
			t.Cleanup(func() { one.Close() })
			store, err := mysql.NewStore(one, mysql.StoreConfig{Allocator: alloc})
			require.NoError(t, err)
			tooLong := keyed("", "too-long", false, "x")
			tooLong.Answer = func(int64) (int, []byte) { return 201, make([]byte, 5000) } // the body column holds 4,096
			_, err = store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{tooLong})
			require.Error(t, err)
			n, err := check.Count(ctx)
			require.NoError(t, err)
			require.Zero(t, n, "the event inserted before the failure is rolled back")
			res, err := store.CreateKeyed(ctx, keyOpts, []exactlyonce.KeyedCreate{keyed("", "next", false, "x")})
			require.NoError(t, err)
			require.True(t, res[0].Created)
			n, err = check.Count(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "the next create on the same connection committed")
		})
	}
}
