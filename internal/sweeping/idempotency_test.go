package sweeping_test

import (
	"context"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Invariant: an invocation of the sweeper deletes expired idempotency keys, and only those.
func TestSweeperPrunesExpiredKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	create := func(key string, ttl time.Duration) {
		_, err := store.Keys.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: ttl, Wait: time.Second}, []exactlyonce.KeyedCreate{{
			Key: exactlyonce.KeyHash("", key), Value: "v", Answer: func(int64) (int, []byte) { return 201, []byte("{}") }}})
		require.NoError(t, err)
	}
	create("short", time.Millisecond)
	create("long", time.Hour)
	keys := func() (n int) {
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency_keys").Scan(&n))
		return n
	}
	require.Eventually(t, func() bool {
		var expired int
		require.NoError(t, store.DB.Pool().QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency_keys WHERE expires_at <= NOW(6)").Scan(&expired))
		return expired == 1
	}, 10*time.Second, 10*time.Millisecond)
	// The maintenance every agent of the sweeper runs between its batches.
	_, err := sweeping.New(store.Sweeping(), sweeping.Config{}).Maintain(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, keys(), "the expired key is gone, the live one kept")
}
