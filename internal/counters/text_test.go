package counters_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/counterstore"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// handleBatch hands one batch of bodies to the consumer, as the Lambda is handed an SQS batch (the
// message ids are the bodies' indexes), and returns the ids of the messages it failed.
func handleBatch(t *testing.T, c *counters.Consumer, bodies ...string) []string {
	t.Helper()
	var ev events.SQSEvent
	for i, b := range bodies {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprint(i), Body: b})
	}
	resp, err := c.Handle(context.Background(), ev)
	require.NoError(t, err)
	failed := []string{}
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	return failed
}

func added(entity, typ, user string) string {
	return body(exactlyonce.CounterMessage{EntityID: entity, EntityType: typ, UserID: user, Action: "added"})
}

// Issue 29, C: the database compares utf8mb4_bin texts with PAD SPACE (a trailing space does not
// count), Go does not. An "added" of type "t" and one of type "t " made two counts in Go's eyes
// and one in SQL's, and from then on every batch with a "t" message of that user failed ("updated 2
// of 1 counts"), an unrelated message with it, on every delivery. Now the message whose text the
// database would fold is refused alone (it ends in the DLQ like any bad message), and the count of
// "t" and the rest of its batches go on.
func TestATrailingSpaceDoesNotJamItsCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	c := &counters.Consumer{Store: store.Counters}

	first := handleBatch(t, c, added("e1", "t", "u"))
	spaced := handleBatch(t, c, added("e2", "t ", "u"))
	later := handleBatch(t, c, added("e3", "t", "u"), added("e1", "t", "v"))
	again := handleBatch(t, c, added("e4", "t", "u"))

	require.Empty(t, later, "a later message of the count, and the unrelated one in its batch, are applied")
	require.Empty(t, again)
	require.Empty(t, first)
	require.Equal(t, []string{"0"}, spaced, "the type with a trailing space is refused, alone")

	sums, err := store.Counters.CounterSums(ctx, "u")
	require.NoError(t, err)
	require.Equal(t, map[string]exactlyonce.CounterSum{"t": {Sum: 3, Version: 3}}, sums)
	v, err := store.Counters.CounterSum(ctx, exactlyonce.CounterKey{EntityType: "t", UserID: "v"})
	require.NoError(t, err)
	require.Equal(t, exactlyonce.CounterSum{Sum: 1, Version: 1}, v)
}

// Counts stored before the door refused trailing spaces (the store takes any text, as it did
// before) stay apart from the counts without them: the store's statements compare texts byte for
// byte, as Go does. An entity type and a user id are checked, each with a message of the same user
// bucket (the user id's hash decides the bucket, so "u" and "u " meet only when their buckets do:
// the test finds such a pair).
func TestCountsStoredWithATrailingSpaceStayApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	user := ""
	for i := 0; user == ""; i++ {
		if u := fmt.Sprint("user-", i); counterstore.UserBucket(u) == counterstore.UserBucket(u+" ") {
			user = u
		}
	}
	_, err := store.Counters.ApplyCounterMessages(ctx, []exactlyonce.CounterMessage{
		{EntityID: "e1", EntityType: "t", UserID: "u", Action: exactlyonce.CounterAdded},
		{EntityID: "e2", EntityType: "t ", UserID: "u", Action: exactlyonce.CounterAdded},
		{EntityID: "e1", EntityType: "t", UserID: user, Action: exactlyonce.CounterAdded},
		{EntityID: "e2", EntityType: "t", UserID: user + " ", Action: exactlyonce.CounterAdded},
	})
	require.NoError(t, err)

	c := &counters.Consumer{Store: store.Counters}
	require.Empty(t, handleBatch(t, c, added("e3", "t", "u"), added("e3", "t", user)))

	sums, err := store.Counters.CounterSums(ctx, "u")
	require.NoError(t, err)
	require.Equal(t, map[string]exactlyonce.CounterSum{"t": {Sum: 2, Version: 2}, "t ": {Sum: 1, Version: 1}}, sums)
	for _, k := range []struct {
		key  exactlyonce.CounterKey
		want exactlyonce.CounterSum
	}{
		{exactlyonce.CounterKey{EntityType: "t", UserID: "u"}, exactlyonce.CounterSum{Sum: 2, Version: 2}},
		{exactlyonce.CounterKey{EntityType: "t ", UserID: "u"}, exactlyonce.CounterSum{Sum: 1, Version: 1}},
		{exactlyonce.CounterKey{EntityType: "t", UserID: user}, exactlyonce.CounterSum{Sum: 2, Version: 2}},
		{exactlyonce.CounterKey{EntityType: "t", UserID: user + " "}, exactlyonce.CounterSum{Sum: 1, Version: 1}},
	} {
		got, err := store.Counters.CounterSum(ctx, k.key)
		require.NoError(t, err)
		require.Equal(t, k.want, got, "%q", k.key)
	}
	sums, err = store.Counters.CounterSums(ctx, user)
	require.NoError(t, err)
	require.Equal(t, map[string]exactlyonce.CounterSum{"t": {Sum: 2, Version: 2}}, sums)

	// The sweeper's reconciliation counts each count's own facts.
	checked, bad, err := store.Counters.ReconcileCounters(ctx, []int64{counterstore.UserBucket("u"), counterstore.UserBucket(user)}, 100)
	require.NoError(t, err)
	require.Equal(t, 4, checked)
	require.Empty(t, bad)
}
