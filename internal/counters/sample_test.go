package counters_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/repo"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// events/counter-batch.json (what `make invoke FN=counter` sends) gets the answer it is meant to
// show: the poison and the malformed messages fail, the others are applied in order, duplicates included.
func TestCounterSample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repo.Root(), "events", "counter-batch.json"))
	require.NoError(t, err)
	var ev events.SQSEvent
	require.NoError(t, json.Unmarshal(b, &ev))
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	var got []exactlyonce.CounterResult
	c := &counters.Consumer{Store: store.Counters, Applied: func(rs []exactlyonce.CounterResult) { got = rs }}
	resp, err := c.Handle(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[6].MessageId}, {ItemIdentifier: ev.Records[7].MessageId}},
		resp.BatchItemFailures, "the poison message and the malformed one")
	require.Equal(t, "2", ev.Records[2].Attributes["ApproximateReceiveCount"], "the redelivered duplicate")
	var applied []bool
	var sums []int64
	for _, r := range got {
		applied = append(applied, r.Applied)
		sums = append(sums, r.Sum)
	}
	// msg-1 added, msg-2 added, msg-1 again, msg-1 read, msg-3 read before its add, msg-3 added late.
	require.Equal(t, []bool{true, true, false, true, false, false}, applied)
	require.Equal(t, []int64{1, 2, 2, 1, 1, 1}, sums)
}
