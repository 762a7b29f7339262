package agents_test

import (
	"context"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func staticMember(t *testing.T, store *wire.Stores, name string, index, total int) *agents.Member {
	t.Helper()
	cfg := memberConfig(name)
	cfg.Static = &agents.Shard{Total: total, Index: index}
	m, err := agents.NewMember(store.Agents, cfg)
	require.NoError(t, err)
	return m
}

func pulseAll(t *testing.T, times int, ms ...*agents.Member) {
	t.Helper()
	for range times {
		for _, m := range ms {
			require.NoError(t, m.Pulse(context.Background()))
		}
	}
}

// Static sharding: each agent runs the shard it is given once every member agrees on the total; a
// second agent on a taken shard is SUSPENDED (the first keeps running); conflicting totals suspend
// every agent involved; static and dynamic agents mixed are suspended. When the conflict goes, the
// suspended agent waits and runs.
func TestStaticSharding(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 8))
	ctx := context.Background()
	a := staticMember(t, store, "a", 0, 2)
	b := staticMember(t, store, "b", 1, 2)
	pulseAll(t, 3, a, b)
	for i, m := range []*agents.Member{a, b} {
		r, ok := m.Assignment()
		require.True(t, ok)
		want, _ := exactlyonce.ShardRange(i, 2)
		require.Equal(t, want, r)
	}

	dup := staticMember(t, store, "dup", 1, 2)
	pulseAll(t, 2, a, b, dup)
	require.Equal(t, exactlyonce.AgentSuspended, dup.State(), "a second agent on shard 1 of 2")
	require.Equal(t, exactlyonce.AgentRunning, b.State(), "the first keeps its shard")
	_, ok := dup.Assignment()
	require.False(t, ok)

	// The holder leaves: the duplicate takes the shard over, WAITING first.
	require.NoError(t, b.Leave(ctx))
	pulseAll(t, 3, a, dup)
	require.Equal(t, exactlyonce.AgentRunning, dup.State())

	// Another total: every agent involved stops.
	odd := staticMember(t, store, "odd", 0, 3)
	pulseAll(t, 2, a, dup, odd)
	for _, m := range []*agents.Member{a, dup, odd} {
		require.Equal(t, exactlyonce.AgentSuspended, m.State())
		_, ok := m.Assignment()
		require.False(t, ok)
	}
	require.NoError(t, odd.Leave(ctx))
	pulseAll(t, 3, a, dup)
	require.Equal(t, exactlyonce.AgentRunning, a.State())
	require.Equal(t, exactlyonce.AgentRunning, dup.State())

	// A dynamic agent among static ones.
	dyn, err := agents.NewMember(store.Agents, memberConfig("dyn"))
	require.NoError(t, err)
	pulseAll(t, 2, a, dup, dyn)
	for _, m := range []*agents.Member{a, dup, dyn} {
		require.Equal(t, exactlyonce.AgentSuspended, m.State())
	}
}

func TestStaticShardingConfigIsValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  agents.MemberConfig
		want string
	}{
		{agents.MemberConfig{Static: &agents.Shard{Total: 2, Index: 2}}, "index must be from 0 to total-1"},
		{agents.MemberConfig{Static: &agents.Shard{Total: 0, Index: 0}}, "index must be from 0 to total-1"},
		{agents.MemberConfig{PulseInterval: 2e9, Expiration: 5e9}, "at least 3 pulse intervals"},
		{agents.MemberConfig{PulseInterval: 1e6, Expiration: 3e6}, "at least 1s"},
	} {
		err := c.cfg.Validate()
		require.Error(t, err)
		require.True(t, strings.Contains(err.Error(), c.want), err.Error())
	}
	require.NoError(t, agents.MemberConfig{}.Validate(), "the defaults: 2 s pulse, 30 s expiration")
}
