package processing_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce/internal/event"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testenv"
	"github.com/stretchr/testify/require"
)

func record(messageID, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: messageID, Body: body, EventSource: "aws:sqs"}
}

func failedIDs(resp events.SQSEventResponse) []string {
	var out []string
	for _, f := range resp.BatchItemFailures {
		out = append(out, f.ItemIdentifier)
	}
	return out
}

func TestBatchReportsExactlyTheMessagesThatMustComeBack(t *testing.T) {
	t.Parallel()
	store := testenv.Store(t, mysql.StoreConfig{}, 4)
	ctx := context.Background()
	p := &processing.Processor{Store: store}

	fresh, err := store.CreatePending(ctx)
	require.NoError(t, err)
	held, err := store.CreatePending(ctx)
	require.NoError(t, err)
	done, err := store.CreateProcessed(ctx, "earlier")
	require.NoError(t, err)

	// Another worker holds `held` for the whole batch.
	tx, err := store.DB().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, "SELECT id FROM events WHERE id = ? FOR UPDATE", held)
	require.NoError(t, err)

	resp, err := p.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record("m-fresh", queue.Encode(fresh)),
		record("m-fresh-again", queue.Encode(fresh)), // the same event twice in one batch
		record("m-held", queue.Encode(held)),
		record("m-done", queue.Encode(done.ID)),
		record("m-unknown", queue.Encode(987654)),
		record("m-garbage", "{{{"),
		record("m-negative", `{"id":-4}`),
		record("m-extra", `{"id":1,"drop":"table"}`),
	}})
	require.NoError(t, err, "the handler never fails the whole batch")
	require.ElementsMatch(t, []string{"m-held", "m-unknown", "m-garbage", "m-negative", "m-extra"}, failedIDs(resp))

	e, err := store.Get(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, event.Processed, e.State)
	require.Equal(t, 1, e.ProcessCount, "two messages, one effect")
	e, err = store.Get(ctx, done.ID)
	require.NoError(t, err)
	require.Equal(t, "earlier", *e.Value)
	e, err = store.Get(ctx, held)
	require.NoError(t, err)
	require.Equal(t, event.Pending, e.State)

	// The held event's message comes back once the other worker has let go, and succeeds.
	require.NoError(t, tx.Rollback())
	resp, err = p.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{record("m-held", queue.Encode(held))}})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
}

func TestDatabaseFailureFailsEveryDecodableMessage(t *testing.T) {
	t.Parallel()
	p := &processing.Processor{Store: testenv.UnreachableStore(t)}
	var recs []events.SQSMessage
	for i := 1; i <= 3; i++ {
		recs = append(recs, record("m"+strconv.Itoa(i), queue.Encode(int64(i))))
	}
	recs = append(recs, record("bad", "x"))
	resp, err := p.Handle(context.Background(), events.SQSEvent{Records: recs})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"m1", "m2", "m3", "bad"}, failedIDs(resp))
}

func TestDecodeRejectsAnythingButAPositiveID(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "null", "{}", `{"id":0}`, `{"id":"5"}`, `{"id":1.5}`, `{"id":1e3}`,
		`{"id":99999999999999999999}`, `{"id":1}{"id":2}`, `[{"id":1}]`, `{"id":null}`} {
		_, err := queue.Decode(body)
		require.Error(t, err, body)
	}
	for _, id := range []int64{1, 42, 1 << 62} {
		got, err := queue.Decode(queue.Encode(id))
		require.NoError(t, err)
		require.Equal(t, id, got)
	}
}
