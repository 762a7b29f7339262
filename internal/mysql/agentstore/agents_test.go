package agentstore_test

import (
	"context"
	"database/sql"
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

// An agent whose pulse is committing while another ejects it stays: the ejection read it expired
// (ExpiredAgents, a consistent read that does not wait for the pulse), but its DELETE checks the
// expiration again under the row lock, so it waits for the pulse and then finds the row unexpired.
// Forced: the test holds the pulse's row lock, uncommitted, until the DELETE waits for it. (With the
// DELETE's expiration check taken out, the live agent was ejected and its next pulse found no row.)
func TestAnAgentPulsingWhileItIsEjectedStays(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	db := store.DB.Pool()
	ctx := context.Background()
	spec := exactlyonce.AgentSpec{Name: "x", Kind: "test", Sharding: exactlyonce.ShardingDynamic}
	live, err := store.Agents.RegisterAgent(ctx, spec, time.Minute)
	require.NoError(t, err)
	late, err := store.Agents.RegisterAgent(ctx, spec, time.Millisecond)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var expired bool
		require.NoError(t, db.QueryRowContext(ctx, "SELECT expiration < NOW(6) FROM agents WHERE id = ?", late.ID).Scan(&expired))
		return expired
	}, 10*time.Second, 10*time.Millisecond, "late expires on the database's clock")

	// late's pulse, its row locked and not committed yet (PulseAgent's statement, in a transaction
	// held open).
	pulse, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer pulse.Rollback()
	res, err := pulse.ExecContext(ctx, "UPDATE agents SET expiration = NOW(6) + INTERVAL 60 SECOND, last_pulse_at = NOW(6) WHERE id = ? LIMIT 1", late.ID)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	type ejected struct {
		gone []exactlyonce.Agent
		err  error
	}
	done := make(chan ejected, 1)
	go func() {
		gone, err := store.Agents.EjectExpiredAgents(ctx, live.ID)
		done <- ejected{gone, err}
	}()
	// The ejection's DELETE waits for the pulse's row lock.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND INFO LIKE 'DELETE FROM agents%'`).Scan(&waiting))
		if waiting > 0 {
			break
		}
		select {
		case e := <-done:
			t.Fatalf("the ejection returned (%v, %v) before its DELETE waited for the pulse", e.gone, e.err)
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the ejection's DELETE did not run within 30 s")
	}
	require.NoError(t, pulse.Commit())

	e := <-done
	require.NoError(t, e.err)
	require.Empty(t, e.gone, "an agent that pulsed before the DELETE had its row is not ejected")
	ok, err := store.Agents.PulseAgent(ctx, late.ID, time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "late still has its row")
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
