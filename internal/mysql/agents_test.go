package mysql_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/routing"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/stretchr/testify/require"
)

// Every insert path stores the event's murmur3 routing hash, and a claim of due events with a range
// takes only the events whose hash lies in it; the ranges of n shards together take every event once.
func TestClaimDueTakesOnlyItsHashRange(t *testing.T) {
	t.Parallel()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	ctx := context.Background()
	ids, err := store.CreatePendingBatch(ctx, 200)
	require.NoError(t, err)
	one, err := store.CreatePending(ctx)
	require.NoError(t, err)
	ids = append(ids, one)
	processed, err := store.CreateProcessed(ctx, "v")
	require.NoError(t, err)
	// Keyed creates insert their events with a statement of their own (idempotency.sql).
	keyedRes, err := store.CreateKeyed(ctx, exactlyonce.KeyOptions{TTL: time.Hour, Wait: time.Second},
		[]exactlyonce.KeyedCreate{keyed("", "pending", true, "x"), keyed("", "processed", false, "x")})
	require.NoError(t, err)
	ids = append(ids, keyedRes[0].Record.EventID)
	keyedProcessed := keyedRes[1].Record.EventID

	hashes := map[int64]uint32{}
	rows, err := store.DB().Query("SELECT id, routing_hash FROM events")
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
		c.Works = fixedWorks(false)
		c.Range = &r
		got, err := store.ClaimDue(ctx, c, 0, 1000)
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

// An agent's id comes from the status counter under its row lock: agents registering at once get
// distinct ids, never an event's, in registration order.
func TestRegisterAgentsAtOnceGivesDistinctIDs(t *testing.T) {
	t.Parallel()
	store := testdb.Store(t, mysql.StoreConfig{}, 16)
	ctx := context.Background()
	var mu sync.Mutex
	ids := map[int64]bool{}
	together(t, 16, func(w int) error {
		a, err := store.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: "a", Kind: "test", Sharding: exactlyonce.ShardingDynamic}, time.Minute)
		if err != nil {
			return err
		}
		mu.Lock()
		ids[a.ID] = true
		mu.Unlock()
		return nil
	})
	require.Len(t, ids, 16)
	eventID, err := store.CreatePending(ctx)
	require.NoError(t, err)
	require.False(t, ids[eventID])
	agents, err := store.Agents(ctx)
	require.NoError(t, err)
	require.Len(t, agents, 16)
	for i, a := range agents {
		require.Equal(t, exactlyonce.AgentWaiting, a.State, "every agent is persisted WAITING first")
		require.Nil(t, a.TotalShardCount)
		if i > 0 {
			require.Greater(t, a.ID, agents[i-1].ID, "ordered by id")
		}
	}
}

// Expiration is the database's clock: an agent that stops pulsing is ejected by another's pulse
// once its expiration has passed, and its own pulse then says it was ejected; a pulse keeps an
// agent in.
func TestPulseAndEjectOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	store := testdb.Store(t, mysql.StoreConfig{}, 4)
	ctx := context.Background()
	spec := exactlyonce.AgentSpec{Name: "x", Kind: "test", Sharding: exactlyonce.ShardingDynamic}
	live, err := store.RegisterAgent(ctx, spec, time.Minute)
	require.NoError(t, err)
	dying, err := store.RegisterAgent(ctx, spec, 200*time.Millisecond)
	require.NoError(t, err)

	gone, err := store.EjectExpiredAgents(ctx, live.ID)
	require.NoError(t, err)
	require.Empty(t, gone, "nobody has expired yet")

	// Wait on the database's clock, not ours.
	require.Eventually(t, func() bool {
		as, now, err := store.AgentsAt(ctx)
		require.NoError(t, err)
		for _, a := range as {
			if a.ID == dying.ID {
				return now.After(a.Expiration)
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)

	gone, err = store.EjectExpiredAgents(ctx, live.ID)
	require.NoError(t, err)
	require.Len(t, gone, 1)
	require.Equal(t, dying.ID, gone[0].ID)

	ok, err := store.PulseAgent(ctx, dying.ID, time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "an ejected agent's pulse finds no row")
	ok, err = store.PulseAgent(ctx, live.ID, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	ok, err = store.AssignAgent(ctx, live.ID, exactlyonce.AgentRunning, new(1), new(0))
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = store.AssignAgent(ctx, live.ID, exactlyonce.AgentRunning, new(1), new(0))
	require.NoError(t, err)
	require.True(t, ok, "an unchanged assignment of a live agent")
	ok, err = store.AssignAgent(ctx, dying.ID, exactlyonce.AgentRunning, new(1), new(0))
	require.NoError(t, err)
	require.False(t, ok)

	require.NoError(t, store.RemoveAgent(ctx, live.ID))
	as, err := store.Agents(ctx)
	require.NoError(t, err)
	require.Empty(t, as)
}
