package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/fault"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/verify"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	drv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// What a 503 on a create means today (README, "API"): the create may have happened. The API's
// write commits on the server and the reply is lost on the way back (the proxy lets the INSERT
// through and cuts the connection before its answer: with the default block allocator the INSERT
// is one autocommit statement, with the literal one it commits in a transaction and the COMMIT's
// answer is lost). The client gets 503 with Retry-After; the event IS stored, complete; and the
// retry the 503 invites, without an Idempotency-Key, stores a second event. With a key, the retry
// answers with the first event instead: TestKeyedCreateWhoseCommitReplyIsLost.
func TestCreateWhoseCommitReplyIsLost(t *testing.T) {
	t.Parallel()
	// The API as functions/api wires it (the async create runs in the request, its answer follows
	// the send) and as the local runner does (answered on commit, an outbox sends the messages).
	groups := map[string]api.AsyncGroup{"lambda": {Inline: true}, "local": {Linger: wire.DefaultAsyncLinger}}
	for _, allocator := range []string{mysql.DefaultAllocator, mysql.AllocatorLiteral} {
		for _, path := range []string{"/events", "/events/async"} {
			for name, group := range groups {
				if path == "/events" && name != "lambda" {
					continue // the group shapes async creates only
				}
				t.Run(allocator+" "+name+" POST "+path, func(t *testing.T) {
					t.Parallel()
					createWhoseCommitReplyIsLost(t, allocator, path, group)
				})
			}
		}
	}
}

func createWhoseCommitReplyIsLost(t *testing.T, allocator, path string, group api.AsyncGroup) {
	ctx := context.Background()
	direct, dsn := testdb.DB(t, 4)
	cfg, err := drv.ParseDSN(dsn)
	require.NoError(t, err)
	proxy := fault.StartProxy(t, cfg.Addr)
	db, err := mysql.Open(mysql.ConnConfig{DSN: proxy.DSN(dsn), MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := wire.StoresOn(db, mysql.Config{Allocator: allocator})
	require.NoError(t, err)
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	srv := openapitest.NewServer(t, &api.Server{Stores: store.API(), Queue: &queue.SQSSender{Client: client, QueueURL: q.URL}, Logger: testLogger(),
		AsyncGroup: group})
	t.Cleanup(srv.Close)
	check, err := wire.StoresOn(direct, mysql.Config{})
	require.NoError(t, err)
	stored := func() []verify.Audit {
		audit, err := mysqltest.AuditEvents(ctx, check.DB.Pool())
		require.NoError(t, err)
		return audit
	}
	async := path == "/events/async"
	created := http.StatusCreated
	if async {
		created = http.StatusAccepted
	}

	// One create answered normally first, so that the allocator's own transactions are behind us.
	status, first := Target{APIURL: srv.URL}.post(t, path)
	require.Equal(t, created, status)
	if async {
		testutil.Eventually(t, 10*time.Second, "the answered async create's message is queued", func() bool {
			return !queueEmpty(t, client, q.URL)
		})
		require.Equal(t, []int64{first}, takeMessages(t, client, q.URL), "the answered async create queued its message")
	}

	proxy.LoseRepliesCommitting("INSERT INTO events", 1)
	resp, err := http.Post(srv.URL+path, "application/json", nil)
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the client cannot know the create happened: %v", body)
	require.Equal(t, "1", resp.Header.Get("Retry-After"), "the 503 invites a retry")
	require.NotEmpty(t, body["error"])
	require.NotContains(t, body, "id", "no id was answered")
	require.EqualValues(t, 1, proxy.LostStatementReplies.Load(), "the server committed the INSERT and its reply was lost")

	// The event is stored, complete: the create happened although the client was told 503.
	audit := stored()
	require.Len(t, audit, 2, "the first event and the one whose answer was lost")
	var orphan verify.Audit
	for _, e := range audit {
		if e.ID != first {
			orphan = e
		}
	}
	if async {
		require.Equal(t, exactlyonce.Pending, orphan.State, "stored pending, complete")
		require.False(t, orphan.HasValue)
		// The API took the insert for failed, so no message names it: the sweeper is its only way.
		require.True(t, queueEmpty(t, client, q.URL), "no message names the event whose create answered 503")
		ledger := verify.NewLedger()
		res, err := sweeping.New(check.Sweeping(), sweeping.Config{Grace: new(time.Duration(0)), Logger: testLogger(), Engine: processing.Engine{Report: ledger}}).Sweep(ctx)
		require.NoError(t, err)
		// The first event too: the test took its message instead of a processor.
		require.Equal(t, 2, res.Processed)
		requireSettledOnce(t, check, ledger, []int64{first, orphan.ID}, exactlyonce.BySweeper)
	} else {
		require.Equal(t, exactlyonce.Processed, orphan.State, "stored processed, complete")
		require.True(t, orphan.HasValue)
		require.Equal(t, exactlyonce.ByAPI, orphan.By)
	}

	// The retry the 503 invites stores a second event: what an idempotency key will prevent.
	status, retried := Target{APIURL: srv.URL}.post(t, path)
	require.Equal(t, created, status, "the retry succeeds")
	require.NotEqual(t, orphan.ID, retried, "the retry is a new event, not the one the lost answer created")
	if async {
		// Its message names it alone: none ever named the event whose create answered 503 (with
		// an outbox, a message for it would have come with or before this one's).
		testutil.Eventually(t, 10*time.Second, "the retry's message is queued", func() bool { return !queueEmpty(t, client, q.URL) })
		require.Equal(t, []int64{retried}, takeMessages(t, client, q.URL))
	}
	ids := []int64{}
	for _, e := range stored() {
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	want := []int64{first, orphan.ID, retried}
	slices.Sort(want)
	require.Equal(t, want, ids, "one create answered 503 and its retry stored two events")
	t.Logf("%s with the %s allocator: 503 with Retry-After; event %d stored anyway; the retry stored event %d",
		path, allocator, orphan.ID, retried)
}

// takeMessages receives every message the queue holds, deletes them, and returns the ids they name,
// in the order received.
func takeMessages(t *testing.T, client *sqs.Client, url string) []int64 {
	t.Helper()
	var ids []int64
	for range 1000 {
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 60,
		})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			return ids
		}
		for _, m := range out.Messages {
			named, err := queue.Decode(aws.ToString(m.Body))
			require.NoError(t, err, "a message the API sent: %q", aws.ToString(m.Body))
			ids = append(ids, named...)
			_, err = client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
	}
	t.Fatal("the queue did not run dry after 1000 receives")
	return nil
}
