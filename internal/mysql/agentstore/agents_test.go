package agentstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// An agent's id comes from the status counter under its row lock: agents registering at once get
// distinct ids, never an event's, in registration order.
func TestRegisterAgentsAtOnceGivesDistinctIDs(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 16))
	ctx := context.Background()
	var mu sync.Mutex
	ids := map[int64]bool{}
	together(t, 16, func(w int) error {
		a, err := store.Agents.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: "a", Kind: "test", Sharding: exactlyonce.ShardingDynamic}, time.Minute)
		if err != nil {
			return err
		}
		mu.Lock()
		ids[a.ID] = true
		mu.Unlock()
		return nil
	})
	require.Len(t, ids, 16)
	eventID, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	require.False(t, ids[eventID])
	agents, err := store.Agents.Agents(ctx)
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
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	spec := exactlyonce.AgentSpec{Name: "x", Kind: "test", Sharding: exactlyonce.ShardingDynamic}
	live, err := store.Agents.RegisterAgent(ctx, spec, time.Minute)
	require.NoError(t, err)
	dying, err := store.Agents.RegisterAgent(ctx, spec, 200*time.Millisecond)
	require.NoError(t, err)

	// dyingAt returns the database's clock and dying's expiration, or false once its row is gone.
	dyingAt := func() (now, expiration time.Time, ok bool) {
		as, now, err := store.Agents.AgentsAt(ctx)
		require.NoError(t, err)
		for _, a := range as {
			if a.ID == dying.ID {
				return now, a.Expiration, true
			}
		}
		return now, time.Time{}, false
	}
	// An ejection before dying's expiration is wrong, one after it right: judged on the database's
	// clock read around the ejection, not on the 200 ms being enough for the statements (a database
	// stalled by a parallel suite can put seconds between the register and the eject).
	before, exp, ok := dyingAt()
	require.True(t, ok)
	gone, err := store.Agents.EjectExpiredAgents(ctx, live.ID)
	require.NoError(t, err)
	after, _, _ := dyingAt()
	switch {
	case after.Before(exp):
		require.Empty(t, gone, "nobody has expired yet")
	case !before.Before(exp):
		require.Len(t, gone, 1, "dying had expired before the ejection began")
	default:
		t.Logf("dying expired during the ejection (%d ejected): either answer is right", len(gone))
	}

	if len(gone) == 0 {
		// Wait on the database's clock, not ours.
		require.Eventually(t, func() bool {
			now, exp, ok := dyingAt()
			return ok && now.After(exp)
		}, 10*time.Second, 20*time.Millisecond)
		gone, err = store.Agents.EjectExpiredAgents(ctx, live.ID)
		require.NoError(t, err)
	}
	require.Len(t, gone, 1)
	require.Equal(t, dying.ID, gone[0].ID)

	ok, err = store.Agents.PulseAgent(ctx, dying.ID, time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "an ejected agent's pulse finds no row")
	ok, err = store.Agents.PulseAgent(ctx, live.ID, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	ok, err = store.Agents.AssignAgent(ctx, live.ID, exactlyonce.AgentRunning, new(1), new(0))
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = store.Agents.AssignAgent(ctx, live.ID, exactlyonce.AgentRunning, new(1), new(0))
	require.NoError(t, err)
	require.True(t, ok, "an unchanged assignment of a live agent")
	ok, err = store.Agents.AssignAgent(ctx, dying.ID, exactlyonce.AgentRunning, new(1), new(0))
	require.NoError(t, err)
	require.False(t, ok)

	require.NoError(t, store.Agents.RemoveAgent(ctx, live.ID))
	as, err := store.Agents.Agents(ctx)
	require.NoError(t, err)
	require.Empty(t, as)
}

// A name or kind longer than its column is cut to the column's length in characters (VARCHAR counts
// characters, not bytes), never inside a character: AGENT_NAME="a" and forty "é" (81 bytes) was
// cut at byte 64, inside an "é", and the database refused the row on every registration, so that
// the agent claimed nothing, ever. A name that fits is kept whole, whatever its bytes.
func TestLongNamesAreCutBetweenCharacters(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	for _, c := range []struct{ name, kind, wantName, wantKind string }{
		{"a" + strings.Repeat("é", 40), "sweeper", "a" + strings.Repeat("é", 40), "sweeper"},
		{"a" + strings.Repeat("é", 70), "k" + strings.Repeat("ü", 20), "a" + strings.Repeat("é", 63), "k" + strings.Repeat("ü", 15)},
		{strings.Repeat("名", 64) + "x", "kind", strings.Repeat("名", 64), "kind"},
		{strings.Repeat("😀", 65), "kind", strings.Repeat("😀", 64), "kind"},
	} {
		a, err := store.Agents.RegisterAgent(ctx, exactlyonce.AgentSpec{Name: c.name, Kind: c.kind, Sharding: exactlyonce.ShardingDynamic}, time.Minute)
		require.NoError(t, err, "%q", c.name)
		agents, err := store.Agents.Agents(ctx)
		require.NoError(t, err)
		var got *exactlyonce.Agent
		for i := range agents {
			if agents[i].ID == a.ID {
				got = &agents[i]
			}
		}
		require.NotNil(t, got)
		require.Equal(t, c.wantName, got.Name)
		require.Equal(t, c.wantKind, got.Kind)
	}
}
