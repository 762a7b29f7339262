package processing_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

func record(messageID, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: messageID, Body: body, EventSource: "aws:sqs"}
}

// holdRow locks event id in a transaction of its own, as another worker would, until the test
// rolls it back (or ends).
func holdRow(t *testing.T, store *wire.Stores, id int64) *sql.Tx {
	t.Helper()
	tx, err := store.DB.Pool().BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = tx.ExecContext(context.Background(), "SELECT id FROM events WHERE id = ? FOR UPDATE", id)
	require.NoError(t, err)
	return tx
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
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	p := &processing.Processor{Engine: processing.Engine{Store: store.Events, TaskStore: store.Tasks}}

	fresh, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	held, err := store.Events.CreatePending(ctx)
	require.NoError(t, err)
	done, err := store.Events.CreateProcessed(ctx, "earlier")
	require.NoError(t, err)

	// The id counter is ahead of every event: the rest of the block the store reserved. The last
	// id of it names no event, and can name none but its store's next create: taken for settled
	// (Outcomes reads no history), its message is acknowledged; the id after it fails.
	counter, err := store.DB.ReadIDCounter(ctx)
	require.NoError(t, err)
	require.Greater(t, counter, done.ID, "a block of ids reserved ahead")

	// Another worker holds `held` for the whole batch.
	tx := holdRow(t, store, held)

	resp, err := p.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record("m-fresh", queue.Encode(fresh)),
		record("m-fresh-again", queue.Encode(fresh)), // the same event twice in one batch
		record("m-held", queue.Encode(held)),
		record("m-done", queue.Encode(done.ID)),
		record("m-unknown", queue.Encode(987654)),
		record("m-unused", queue.Encode(counter)),
		record("m-beyond", queue.Encode(counter+1)),
		record("m-garbage", "{{{"),
		record("m-negative", `{"id":-4}`),
		record("m-extra", `{"id":1,"drop":"table"}`),
	}})
	require.NoError(t, err, "the handler never fails the whole batch")
	require.ElementsMatch(t, []string{"m-held", "m-unknown", "m-beyond", "m-garbage", "m-negative", "m-extra"}, failedIDs(resp))
	_, err = store.Events.Get(ctx, counter)
	require.Equal(t, exactlyonce.ENOTFOUND, exactlyonce.ErrorCode(err), "an acknowledged unused id wrote nothing")

	e, err := store.Events.Get(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Processed, e.State)
	require.Equal(t, 1, e.ProcessCount, "two messages, one effect")
	e, err = store.Events.Get(ctx, done.ID)
	require.NoError(t, err)
	require.Equal(t, "earlier", *e.Value)
	e, err = store.Events.Get(ctx, held)
	require.NoError(t, err)
	require.Equal(t, exactlyonce.Pending, e.State)

	// The held event's message comes back once the other worker has let go, and succeeds.
	require.NoError(t, tx.Rollback())
	resp, err = p.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{record("m-held", queue.Encode(held))}})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
}

// A message naming several events succeeds only when all of them are settled; the events it
// names are processed whatever happens to the message, and once only.
func TestMessageNamingSeveralEvents(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	ctx := context.Background()
	p := &processing.Processor{Engine: processing.Engine{Store: store.Events, TaskStore: store.Tasks}}
	pending := func() int64 {
		id, err := store.Events.CreatePending(ctx)
		require.NoError(t, err)
		return id
	}
	a, b, c, d, held := pending(), pending(), pending(), pending(), pending()
	done, err := store.Events.CreateProcessed(ctx, "earlier")
	require.NoError(t, err)

	tx := holdRow(t, store, held)

	resp, err := p.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record("m-all", queue.EncodeIDs([]int64{a, b, done.ID})),
		record("m-held", queue.EncodeIDs([]int64{c, held})),
		record("m-unknown", queue.EncodeIDs([]int64{d, 987654})),
		record("m-overlap", queue.EncodeIDs([]int64{b, a})),
	}})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"m-held", "m-unknown"}, failedIDs(resp))
	for _, id := range []int64{a, b, c, d} {
		e, err := store.Events.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, exactlyonce.Processed, e.State, "event %d", id)
		require.Equal(t, 1, e.ProcessCount, "event %d", id)
	}

	// m-held comes back after the holder lets go and succeeds: c is already processed, held now is.
	require.NoError(t, tx.Rollback())
	resp, err = p.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{record("m-held", queue.EncodeIDs([]int64{c, held}))}})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	e, err := store.Events.Get(ctx, c)
	require.NoError(t, err)
	require.Equal(t, 1, e.ProcessCount)
}

func TestDatabaseFailureFailsEveryDecodableMessage(t *testing.T) {
	t.Parallel()
	p := &processing.Processor{Engine: processing.Engine{Store: wire.NewStores(testdb.UnreachableCore(t)).Events, TaskStore: wire.NewStores(testdb.UnreachableCore(t)).Tasks}}
	var recs []events.SQSMessage
	for i := 1; i <= 3; i++ {
		recs = append(recs, record("m"+strconv.Itoa(i), queue.Encode(int64(i))))
	}
	recs = append(recs, record("bad", "x"))
	resp, err := p.Handle(context.Background(), events.SQSEvent{Records: recs})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"m1", "m2", "m3", "bad"}, failedIDs(resp))
}
