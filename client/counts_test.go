package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/client"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// UserCounts returns every count of a user, however many pages the API answers them in (up to
// 1,000 types a request): a user with 2,345 types, whose id a path must escape, gets all of them.
func TestUserCountsFollowsThePages(t *testing.T) {
	t.Parallel()
	_, c, store := pagingStack(t)
	ctx := context.Background()
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

// TaskAttempts returns every attempt of a task, however many pages the API answers them in (up to
// 1,000 a request): a task with 2,345 attempts, as manual retries leave them, gets all of them, in
// order.
func TestTaskAttemptsFollowsThePages(t *testing.T) {
	t.Parallel()
	s, c, store := pagingStack(t)
	ctx := context.Background()
	created, err := store.Tasks.CreateTasks(ctx, []exactlyonce.NewTask{{URL: "http://127.0.0.1:1/a", Payload: json.RawMessage(`{}`), MaxRetries: 3}})
	require.NoError(t, err)
	id := created[0].ID
	const n = 2345
	require.NoError(t, mysqltest.LoadAttempts(ctx, s.direct, id, 1, n, "HTTP 503"))
	attempts, err := c.TaskAttempts(ctx, id)
	require.NoError(t, err)
	require.Equal(t, n, len(attempts), "attempts read")
	for i, a := range attempts {
		require.Equal(t, i+1, a.Number, "every attempt once, in order")
	}
}

// pagingStack is a stack with a client and stores on its database, to seed more than one page of
// what a call reads.
func pagingStack(t *testing.T) (*stack, *client.Client, *wire.Stores) {
	t.Helper()
	s := startStack(t)
	store, err := wire.StoresOn(s.direct, mysql.Config{})
	require.NoError(t, err)
	return s, s.client(t, client.Retry{}), store
}
