package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/client"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// UserCounts returns every count of a user, however many pages the API answers them in (up to
// 1,000 types a request): a user with 2,345 types, whose id a path must escape, gets all of them.
func TestUserCountsFollowsThePages(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	c := s.client(t, client.Retry{})
	ctx := context.Background()
	store, err := wire.StoresOn(s.direct, mysql.Config{})
	require.NoError(t, err)
	const user, types = "ann%é ?#", 2345
	var ms []exactlyonce.CounterMessage
	for i := range types {
		ms = append(ms, exactlyonce.CounterMessage{EntityID: "e", EntityType: fmt.Sprintf("type %04d", i), UserID: user, Action: "added"})
	}
	for lo := 0; lo < len(ms); lo += 500 {
		_, err := store.Counters.ApplyCounterMessages(ctx, ms[lo:min(lo+500, len(ms))])
		require.NoError(t, err)
	}
	counts, err := c.UserCounts(ctx, user)
	require.NoError(t, err)
	require.Len(t, counts, types)
	for i := range types {
		require.Equal(t, client.Count{Sum: 1, Version: 1}, counts[fmt.Sprintf("type %04d", i)], i)
	}
}
