package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Timestamps are written by the database (NOW(6), in the session's time zone) and read as UTC
// (the driver's Loc). Every session is pinned to UTC, so the two agree whatever the server's
// default zone: here a private server whose default is five hours east of UTC.
func TestTimestampsAreUTCWhateverTheServerZone(t *testing.T) {
	t.Parallel()
	srv := fault.PrivateServer(t)
	ctx := context.Background()
	require.NoError(t, srv.CreateDatabase(ctx, "events"))

	admin, err := mysql.Open(mysql.ConnConfig{DSN: srv.DSN("")})
	require.NoError(t, err)
	defer admin.Close()
	// The server's default zone, for every session that does not set its own (what
	// --default-time-zone sets at start).
	_, err = admin.ExecContext(ctx, "SET GLOBAL time_zone = '+05:00'")
	require.NoError(t, err)
	var global string
	require.NoError(t, admin.QueryRowContext(ctx, "SELECT @@global.time_zone").Scan(&global))
	require.Equal(t, "+05:00", global)

	db, err := mysql.Open(mysql.ConnConfig{DSN: srv.DSN("events")})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, mysql.Migrate(ctx, db))
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)

	// The times must fall between the creates' start and the reads' end (with a second for the
	// clocks): a wrong zone is hours off. Not within a second of one instant: a database stalled
	// by a parallel suite can put seconds between the creates and the reads.
	before := time.Now().UTC().Add(-time.Second)
	created, err := store.Events.CreateProcessed(ctx, "hello")
	require.NoError(t, err)
	pendingID, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)

	got, err := store.Events.Get(ctx, created.ID)
	require.NoError(t, err)
	pending, err := store.Events.Get(ctx, pendingID)
	require.NoError(t, err)
	after := time.Now().UTC().Add(time.Second)
	require.WithinRange(t, got.CreatedAt, before, after, "created_at of a processed event")
	require.NotNil(t, got.ProcessedAt)
	require.WithinRange(t, *got.ProcessedAt, before, after, "processed_at")
	require.WithinRange(t, pending.CreatedAt, before, after, "created_at of a pending event")

	var session string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT @@session.time_zone").Scan(&session))
	require.Equal(t, "+00:00", session, "the session is pinned to UTC")
}
