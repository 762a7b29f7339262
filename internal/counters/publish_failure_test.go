package counters_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// halfTopic is a topic that takes the first half of each publish and refuses the rest, as SNS or
// SQS answer a batch with some entries failed.
type halfTopic struct{ took []string }

func (h *halfTopic) Publish(_ context.Context, ns []counters.Notification) ([]string, error) {
	var took []string
	for _, n := range ns[:len(ns)/2] {
		took = append(took, n.ID)
	}
	h.took = append(h.took, took...)
	return took, errors.New("some entries failed")
}

// A consumer marks published only the notifications its topic took: those it refused stay
// unpublished in the database, for the sweep to publish (internal/sweeping
// TestCounterSweepPublishesWhatWasNotPublished). Marked as well, they were lost: the sweep
// publishes only unpublished ones.
func TestANotificationTheTopicRefusedStaysForTheSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	topic := &halfTopic{}
	c := &counters.Consumer{Store: store.Counters, Publisher: topic}
	var ev events.SQSEvent
	for i := range 4 {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprint(i),
			Body: fmt.Sprintf(`{"entityId":"e%d","entityType":"t","userId":"u","action":"added"}`, i)})
	}
	resp, err := c.Handle(ctx, ev)
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures, "the counts are committed: the messages succeed")
	require.Len(t, topic.took, 2)

	rows, err := store.DB.Pool().QueryContext(ctx, "SELECT LOWER(HEX(id)), state FROM counter_notifications")
	require.NoError(t, err)
	defer rows.Close()
	state := map[string]int{}
	for rows.Next() {
		var id string
		var s int
		require.NoError(t, rows.Scan(&id, &s))
		state[id] = s
	}
	require.NoError(t, rows.Err())
	require.Len(t, state, 4, "one notification a message")
	published := map[string]bool{}
	for _, id := range topic.took {
		published[id] = true
	}
	for id, s := range state {
		if published[id] {
			require.Equal(t, 1, s, "notification %s was taken: published", id)
		} else {
			require.Equal(t, 0, s, "notification %s was refused: left for the sweep", id)
		}
	}
}
