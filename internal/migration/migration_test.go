package migration_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/migration"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openThrough returns an Open func for a fresh, empty database reached through a proxy the test controls.
func openThrough(t *testing.T) (*fault.Proxy, func(context.Context) (*mysql.DB, error)) {
	t.Helper()
	dsn := testdb.NewDatabase(t)
	cfg, err := drv.ParseDSN(dsn)
	require.NoError(t, err)
	proxy := fault.StartProxy(t, cfg.Addr)
	cfg.Timeout = time.Second
	dsn = proxy.DSN(cfg.FormatDSN())
	return proxy, func(context.Context) (*mysql.DB, error) {
		db, err := mysql.Open(mysql.ConnConfig{DSN: dsn})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { db.Close() })
		return mysql.New(db, mysql.Config{})
	}
}

// The deploy-time trigger can run before a new RDS Proxy hands out connections: the handler retries
// until the database answers, then migrates.
func TestRetriesUntilTheDatabaseAnswers(t *testing.T) {
	t.Parallel()
	proxy, open := openThrough(t)
	proxy.SetRefusing(true)
	var retries []int
	h := &migration.Handler{Open: open, Logger: quiet, FirstBackoff: 10 * time.Millisecond,
		OnRetry: func(attempt int, err error) {
			retries = append(retries, attempt)
			if attempt == 2 {
				proxy.SetRefusing(false) // the database comes up
			}
		}}
	// A bound on a hang, not on speed: a whole migration of an empty database (thousands of
	// partitions) took 74 s on a loaded 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := h.Handle(ctx, json.RawMessage(`{}`))
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, retries)
	require.Equal(t, 3, res.Attempts)
	require.Equal(t, mysql.LatestVersion(), res.Version)
}

func TestGivesUpBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	proxy, open := openThrough(t)
	proxy.SetRefusing(true)
	h := &migration.Handler{Open: open, Logger: quiet, FirstBackoff: 20 * time.Millisecond, StopBefore: 500 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := h.Handle(ctx, json.RawMessage(`{}`))
	require.Error(t, err)
	require.True(t, mysql.IsUnavailable(err), "the error says the database was unreachable: %v", err)
	require.Greater(t, res.Attempts, 1)
	require.NoError(t, ctx.Err(), "it returned before the invocation's deadline")
}

func TestABrokenRuleIsNotRetried(t *testing.T) {
	t.Parallel()
	db := testdb.Core(t, mysql.Config{}, 2)
	_, err := db.Pool().Exec("CREATE TABLE extra (id INT NOT NULL, UNIQUE KEY u (id))")
	require.NoError(t, err)
	h := &migration.Handler{Open: func(context.Context) (*mysql.DB, error) { return db, nil }, Logger: quiet,
		OnRetry: func(int, error) { t.Error("a broken rule must not be retried") }}
	res, err := h.Handle(context.Background(), json.RawMessage(`{}`))
	require.ErrorContains(t, err, "schema rules broken")
	require.ErrorContains(t, err, "extra.u")
	require.Equal(t, 1, res.Attempts)
}
