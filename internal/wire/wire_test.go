package wire_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func load(t *testing.T, m map[string]string) config.Config {
	t.Helper()
	c, err := config.Load(func(k string) string {
		if k == "DB_DSN" && m[k] == "" && m["DB_HOST"] == "" { // DB_DSN names the whole database: never beside DB_HOST
			return "u:p@tcp(h:3306)/d"
		}
		return m[k]
	})
	require.NoError(t, err)
	return c
}

// sweepStore records what the sweeper asks of the store, and finds nothing due.
type sweepStore struct {
	processing.Store // the rest is not called
	grace            time.Duration
	limit            int
}

func (s *sweepStore) ClaimDue(_ context.Context, _ exactlyonce.Claim, grace time.Duration, limit int, _ exactlyonce.Decide) (exactlyonce.Claimed, error) {
	s.grace, s.limit = grace, limit
	return exactlyonce.Claimed{}, nil
}

// sweep runs one sweep configured by c and returns the grace and batch size the store was asked for.
func sweep(t *testing.T, c config.Config) (grace time.Duration, limit int) {
	t.Helper()
	st := &sweepStore{}
	_, err := sweeping.New(sweeping.Stores{Events: st}, wire.Sweeping(c, slog.New(slog.NewTextHandler(io.Discard, nil)))).Sweep(context.Background())
	require.NoError(t, err)
	return st.grace, st.limit
}

// With nothing set, each component applies its own default: these are the defaults the README
// lists, read from where they live.
func TestDefaults(t *testing.T) {
	t.Parallel()
	c := load(t, nil)
	require.Equal(t, mysql.Config{}, wire.StoreConfig(c.Store), "the store's defaults apply")
	require.Equal(t, "block", mysql.DefaultAllocator)
	require.Equal(t, 1024, mysql.DefaultBlockSize)
	require.Equal(t, 10*time.Minute, mysql.DefaultBlockMaxAge)

	db, err := mysql.Open(wire.Conn(c.DB))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.Equal(t, 4, db.Stats().MaxOpenConnections)

	grace, limit := sweep(t, c)
	require.Equal(t, 10*time.Second, grace)
	require.Equal(t, 500, limit)

	log := wire.Logger(c)
	require.True(t, log.Enabled(context.Background(), slog.LevelInfo))
	require.False(t, log.Enabled(context.Background(), slog.LevelDebug))

	v := wire.Visibility(c, nil)
	require.Zero(t, v.Heartbeat, "the processor's default")
	require.Zero(t, v.Extension, "the processor's default")
	require.Equal(t, "events", wire.LocalQueue(c.Local.QueueName).Name)
}

// SWEEP_GRACE=0 reaches the store as no grace at all, and any other value as itself.
func TestSweepGrace(t *testing.T) {
	t.Parallel()
	grace, _ := sweep(t, load(t, map[string]string{"SWEEP_GRACE": "0"}))
	require.Zero(t, grace, "SWEEP_GRACE=0 is no grace, not the default")
	grace, limit := sweep(t, load(t, map[string]string{"SWEEP_GRACE": "3s", "SWEEP_BATCH_SIZE": "20"}))
	require.Equal(t, 3*time.Second, grace)
	require.Equal(t, 20, limit)
}

func TestConfigured(t *testing.T) {
	t.Parallel()
	c := load(t, map[string]string{"DB_HOST": "h", "DB_USER": "u", "DB_PASSWORD": "p", "DB_PORT": "3307",
		"DB_NAME": "n", "DB_TLS": "true", "DB_MAX_OPEN_CONNS": "7", "AWS_REGION": "eu-west-1",
		"ALLOCATOR": "literal", "ALLOCATOR_BLOCK_SIZE": "8", "QUEUE_URL": "http://q/000000000000/events",
		"VISIBILITY_HEARTBEAT": "1s", "VISIBILITY_EXTENSION": "3s", "QUEUE_NAME": "mine", "LOG_LEVEL": "warn"})
	require.Equal(t, mysql.ConnConfig{Host: "h", Port: 3307, Name: "n", User: "u", Password: "p",
		TLS: true, Region: "eu-west-1", MaxOpenConns: 7}, wire.Conn(c.DB))
	require.Equal(t, mysql.Config{Allocator: "literal", BlockSize: 8}, wire.StoreConfig(c.Store))
	v := wire.Visibility(c, nil)
	require.Equal(t, "http://q/000000000000/events", v.QueueURL)
	require.Equal(t, time.Second, v.Heartbeat)
	require.Equal(t, 3*time.Second, v.Extension)
	require.Equal(t, "mine", wire.LocalQueue(c.Local.QueueName).Name)
	require.False(t, wire.Logger(c).Enabled(context.Background(), slog.LevelInfo))
}

// The allocators config accepts are the store's.
func TestAllocatorsAgree(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, []string{mysql.AllocatorBlock, mysql.AllocatorLiteral}, config.Allocators())
	for _, a := range config.Allocators() {
		_, err := wire.StoresOn(nil, wire.StoreConfig(config.Store{Allocator: a}))
		require.NoError(t, err, a)
	}
}

// OpenStore migrates unless DB_MIGRATE=false.
func TestOpenStoreMigrates(t *testing.T) {
	t.Parallel()
	tables := func(t *testing.T, migrate string) int {
		t.Helper()
		c := load(t, map[string]string{"DB_DSN": testdb.NewDatabase(t), "DB_MIGRATE": migrate})
		store, err := wire.OpenStores(context.Background(), c)
		require.NoError(t, err)
		t.Cleanup(func() { store.DB.Pool().Close() })
		var n int
		require.NoError(t, store.DB.Pool().QueryRow(
			"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&n))
		return n
	}
	require.Positive(t, tables(t, ""), "unset: migrated")
	require.Positive(t, tables(t, "true"))
	require.Zero(t, tables(t, "false"))
}
