package eventstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/routing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Every insert path stores the event's murmur3 routing hash, and a claim of due events with a range
// takes only the events whose hash lies in it; the ranges of n shards together take every event once.
func TestClaimDueTakesOnlyItsHashRange(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	ids, err := store.Events.CreatePendingBatch(ctx, 200)
	require.NoError(t, err)
	one, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	ids = append(ids, one)
	processed, err := store.Events.CreateProcessed(ctx, "v")
	require.NoError(t, err)
	// Keyed creates insert their events with a statement of their own (idempotency.sql).
	keyedRes, err := store.Keys.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: time.Hour, Wait: time.Second},
		[]exactlyonce.KeyedCreate{keyed("", "pending", true, "x"), keyed("", "processed", false, "x")})
	require.NoError(t, err)
	ids = append(ids, keyedRes[0].Record.EventID)
	keyedProcessed := keyedRes[1].Record.EventID

	hashes := map[int64]uint32{}
	rows, err := store.DB.Pool().Query("SELECT id, routing_hash FROM events")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var h uint32
		require.NoError(t, rows.Scan(&id, &h))
		hashes[id] = h
	}
	require.NoError(t, rows.Err())
	rows.Close()
	for _, id := range append(ids, processed.ID, keyedProcessed) {
		require.Equalf(t, routing.EventHash(id), hashes[id], "event %d's stored routing hash", id)
	}

	const total = 3
	seen := map[int64]int{}
	for i := range total {
		r, err := exactlyonce.ShardRange(i, total)
		require.NoError(t, err)
		c := claimFor(exactlyonce.BySweeper, time.Minute)
		c.Range = &r
		got, err := store.Events.ClaimDue(ctx, c, 0, 1000, mysqltest.SettleAll(fixedValue))
		require.NoError(t, err)
		require.NotEmpty(t, got.Settled, "shard %d of %d claimed nothing", i, total)
		for _, id := range got.Settled {
			require.Truef(t, r.Contains(routing.EventHash(id)), "shard %d (%s) claimed event %d, hash %d", i, r, id, routing.EventHash(id))
			seen[id]++
		}
	}
	require.Len(t, seen, len(ids), "the shards together claimed every pending event")
	for id, n := range seen {
		require.Equalf(t, 1, n, "event %d claimed %d times", id, n)
	}
}
